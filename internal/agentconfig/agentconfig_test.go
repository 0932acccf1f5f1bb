package agentconfig

import (
	"strings"
	"testing"
)

func TestIsHexDigest(t *testing.T) {
	if isHexDigest(strings.Repeat("G", 64)) || !isHexDigest(strings.Repeat("F", 64)) || isHexDigest("ab") {
		t.Error("isHexDigest")
	}
}
