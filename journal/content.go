package journal

import (
	"encoding/json"
	"errors"
)

// Content is one ACP content block, kept as the JSON it is journaled as: a
// text block the host built (TextContent), or a block of another type
// passed through from the plugin as the plugin wrote it. A nil Content
// encodes as null.
type Content json.RawMessage

// TextContent is the text block {"type":"text","text":text}; an empty
// text is left out, as the host has always journaled it.
func TextContent(text string) Content {
	b, err := json.Marshal(textBlock{Type: "text", Text: text})
	if err != nil {
		// A struct of two strings always marshals.
		panic("journal: encode a text block: " + err.Error())
	}
	return b
}

// textBlock is the wire form of a text block; its members are in the
// order they have always been written.
type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// Type is the block's type ("text", "image", "resource_link", …), or ""
// when the block is not an object with a type.
func (c Content) Type() string { return c.head().Type }

// Text is the block's text member: the text of a text block, "" for most
// other types.
func (c Content) Text() string { return c.head().Text }

func (c Content) head() textBlock {
	var h textBlock
	_ = json.Unmarshal(c, &h)
	return h
}

// MarshalJSON writes the block as it is, as json.RawMessage does.
func (c Content) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("null"), nil
	}
	return c, nil
}

// UnmarshalJSON keeps a copy of the block's JSON.
func (c *Content) UnmarshalJSON(b []byte) error {
	if c == nil {
		return errors.New("journal: UnmarshalJSON on a nil *Content")
	}
	*c = append((*c)[:0], b...)
	return nil
}
