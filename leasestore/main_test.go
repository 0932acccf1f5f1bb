package leasestore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

// childEnv selects a child-process role for this test binary: the crash
// tests re-execute it to get a process they can SIGKILL or watch die.
const childEnv = "LEASESTORE_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	goleak.VerifyTestMain(m)
}

func runChild(role string) int {
	dir := os.Getenv("LEASESTORE_TEST_DIR")
	switch role {
	case "append-forever":
		return appendForever(dir)
	case "open":
		return openOnce(dir)
	}
	fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
	return 2
}

// appendForever makes a live session and appends numbered entries until it
// is killed, printing each seq only after Append acknowledged it.
func appendForever(dir string) int {
	ctx := context.Background()
	s, err := leasestore.OpenBadger(ctx, dir, leasestore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sess := leasestoretest.Live(exitTB{}, ctx, s, "crash")
	for i := 0; ; i++ {
		es, err := s.Append(ctx, "crash", sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(fmt.Sprintf("payload-%d", i))})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("%d %d\n", es[0].Seq, i)
	}
}

// openOnce opens the store in dir and reports how it went.
func openOnce(dir string) int {
	ctx := context.Background()
	s, err := leasestore.OpenBadger(ctx, dir, leasestore.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	if r := s.Recovery(); r != nil {
		fmt.Println("recovered:", r)
	} else {
		fmt.Println("opened")
	}
	if err := s.Close(ctx); err != nil {
		fmt.Println("close error:", err)
		return 4
	}
	return 0
}

// exitTB lets the conformance helpers run in a child process, where there is
// no *testing.T: a failure exits the child.
type exitTB struct{ testing.TB }

func (exitTB) Helper() {}
func (exitTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}
func (exitTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
