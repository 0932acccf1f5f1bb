package etcdstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks()...)
}
