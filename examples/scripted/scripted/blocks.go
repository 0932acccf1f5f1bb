package scripted

import (
	"encoding/base64"
	"fmt"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// describeBlocks reports each block of the prompt other than text as a
// message chunk saying what arrived ("image image/png, 68 bytes"), so a
// client's test can see that its blocks reached the agent intact. It
// reports whether there was any. A block of a type the agent did not
// declare (audio, or one it does not know) fails the turn: an agent must
// never drop a block silently.
func describeBlocks(blocks []sdk.ContentBlock, turn *sdk.Turn) (bool, error) {
	described := false
	for _, b := range blocks {
		var line string
		switch b.Type {
		case sdk.BlockText, "":
			continue
		case sdk.BlockImage:
			img, err := b.Image()
			if err != nil {
				return false, fmt.Errorf("scripted: %w", err)
			}
			line = "image " + img.MimeType + ", " + size(img.Data)
			if img.URI != "" {
				line += ", " + img.URI
			}
		case sdk.BlockResource:
			r, err := b.Resource()
			if err != nil {
				return false, fmt.Errorf("scripted: %w", err)
			}
			line = "resource " + r.URI
			if r.MimeType != "" {
				line += " (" + r.MimeType + ")"
			}
			if r.Blob != "" {
				line += ", " + size(r.Blob)
			} else {
				line += fmt.Sprintf(", %d characters: %q", len([]rune(r.Text)), clip(r.Text, 40))
			}
		case sdk.BlockResourceLink:
			l, err := b.ResourceLink()
			if err != nil {
				return false, fmt.Errorf("scripted: %w", err)
			}
			line = "resource_link " + l.URI + " (" + l.Name + ")"
		default:
			return false, fmt.Errorf("scripted: cannot take a %s block: the agent declares image, resource and resource_link blocks only", b.Type)
		}
		turn.Message("received " + line + "\n")
		described = true
	}
	return described, nil
}

// size is the decoded size of base64 data, or says it is not base64.
func size(data string) string {
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return fmt.Sprintf("%d characters of malformed base64", len(data))
	}
	return fmt.Sprintf("%d bytes", len(b))
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
