package clusterfaults

import (
	"os"
	"testing"

	"github.com/agenthost/agenthost/internal/buildtest"
)

// bins are the programs the test starts, built once per run.
var bins struct {
	agenthost, etcdmember, scripted string
}

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, map[*string]string{
		&bins.agenthost:  "../../cmd/agenthost",
		&bins.etcdmember: "../etcdmember",
		&bins.scripted:   "../../examples/scripted/cmd/agenthost-plugin-scripted",
	}))
}
