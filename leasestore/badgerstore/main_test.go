package badgerstore_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
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
	case "append-batches-forever":
		return appendBatchesForever(dir)
	case "append-until-closed":
		return appendUntilClosed(dir)
	case "open":
		return openOnce(dir, true)
	case "open-and-die":
		// Open, say how it went, and exit without closing: a host that
		// died before it got to tell anyone.
		return openOnce(dir, false)
	case "probe":
		// The child's half of Options.ProbeOpen, as a host would run it.
		if err := badgerstore.ProbeStore(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "restore-crash":
		return restoreAndCrash(dir, os.Getenv("LEASESTORE_TEST_STEP"))
	case "delete-and-die":
		// Delete a session and die at once, before the backup loop would
		// have rewritten the backup after the record went.
		s, err := badgerstore.Open(context.Background(), dir, badgerstore.Options{BackupDelay: time.Hour})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := s.Delete(context.Background(), os.Getenv("LEASESTORE_TEST_SESSION"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("deleted")
		return 0
	case "lock-and-leave-heir":
		return lockAndLeaveHeir(dir, os.Getenv("LEASESTORE_TEST_HEIR_SLEEP"))
	}
	fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
	return 2
}

// appendForever makes a live session and appends numbered entries until it
// is killed, printing each seq only after Append acknowledged it.
func appendForever(dir string) int {
	ctx := context.Background()
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
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

// appendBatchesForever appends batches of 32 entries of 1 KiB, numbered
// by a counter, until it is killed, printing "seq counter" for the last
// entry of each batch once Append acknowledged it: a journal that fills
// Badger's 8 MiB memtable, and rotates it, within a second.
func appendBatchesForever(dir string) int {
	ctx := context.Background()
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sess := leasestoretest.Live(exitTB{}, ctx, s, "crash")
	n := 0
	for {
		in := make([]leasestore.EntryInput, 32)
		for i := range in {
			in[i] = leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: batchPayload(n)}
			n++
		}
		es, err := s.Append(ctx, "crash", sess.Lease.Fence, in...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("%d %d\n", es[len(es)-1].Seq, n-1)
	}
}

// appendUntilClosed appends batches of 32 entries of 1 KiB to a live
// session until stdin closes, printing "ok SEQ" for each acknowledged batch
// and "refused ERR" for each refused one (pausing 5 ms after a refusal, as
// a host's pump retries), then closes the store and prints "closed ERR".
func appendUntilClosed(dir string) int {
	ctx := context.Background()
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
	if err != nil {
		fmt.Println("open error:", err)
		return 1
	}
	sess := leasestoretest.Live(exitTB{}, ctx, s, "full")
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	n := 0
	for {
		select {
		case <-stop:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.Close(cctx)
			cancel()
			fmt.Printf("closed %v\n", err)
			return 0
		default:
		}
		in := make([]leasestore.EntryInput, 32)
		for i := range in {
			in[i] = leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: batchPayload(n + i)}
		}
		es, err := s.Append(ctx, "full", sess.Lease.Fence, in...)
		if err != nil {
			fmt.Printf("refused %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			time.Sleep(5 * time.Millisecond)
			continue
		}
		n += len(in)
		fmt.Printf("ok %d\n", es[len(es)-1].Seq)
	}
}

// batchPayload is the 1 KiB payload appendBatchesForever writes as entry n.
func batchPayload(n int) []byte {
	p := fmt.Appendf(nil, "payload-%d ", n)
	for len(p) < 1024 {
		p = append(p, 'x')
	}
	return p
}

// openOnce opens the store in dir, reports how it went and, when asked
// to, closes it again.
func openOnce(dir string, thenClose bool) int {
	ctx := context.Background()
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	if r := s.Recovery(); r != nil {
		fmt.Println("recovered:", r)
	} else {
		fmt.Println("opened")
	}
	if !thenClose {
		return 0
	}
	if err := s.Close(ctx); err != nil {
		fmt.Println("close error:", err)
		return 4
	}
	return 0
}

// restoreAndCrash opens the store in dir, which must need a restore, and
// dies at the given step of it, as a SIGKILL or a power cut there would
// leave things: no deferred call, no cleanup. Exit code 7 says it got
// there.
func restoreAndCrash(dir, step string) int {
	var opts badgerstore.Options
	badgerstore.SetRestoreHook(&opts, func(at string) {
		if at == step {
			os.Exit(7)
		}
	})
	s, err := badgerstore.Open(context.Background(), dir, opts)
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	fmt.Println("the restore finished without reaching step", step)
	_ = s.Close(context.Background())
	return 4
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
