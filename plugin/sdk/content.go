package sdk

import (
	"encoding/json"
	"fmt"
)

// The ACP prompt content types beyond text. A ContentBlock of one of these
// types carries its ACP JSON in JSON; the accessors below decode it.
const (
	BlockText         = "text"
	BlockImage        = "image"
	BlockAudio        = "audio"
	BlockResource     = "resource"
	BlockResourceLink = "resource_link"
)

// Image is an image block: base64 Data of MimeType, or a URI.
type Image struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
	URI      string `json:"uri,omitempty"`
}

// Audio is an audio block: base64 Data of MimeType.
type Audio struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

// Resource is an embedded resource (ACP "resource", capability
// embeddedContext): the contents of a file or URI the user attached. Text
// is set for a text resource, Blob (base64) for a binary one.
type Resource struct {
	URI      string `json:"uri"`
	MimeType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

// ResourceLink is a reference to a resource the agent may read itself.
type ResourceLink struct {
	URI         string `json:"uri"`
	Name        string `json:"name"`
	MimeType    string `json:"mimeType,omitempty"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Size        *int64 `json:"size,omitempty"`
}

// Image decodes an image block.
func (b ContentBlock) Image() (Image, error) {
	var v Image
	return v, b.decode(BlockImage, &v)
}

// Audio decodes an audio block.
func (b ContentBlock) Audio() (Audio, error) {
	var v Audio
	return v, b.decode(BlockAudio, &v)
}

// Resource decodes an embedded resource block.
func (b ContentBlock) Resource() (Resource, error) {
	var v struct {
		Resource Resource `json:"resource"`
	}
	err := b.decode(BlockResource, &v)
	return v.Resource, err
}

// ResourceLink decodes a resource_link block.
func (b ContentBlock) ResourceLink() (ResourceLink, error) {
	var v ResourceLink
	return v, b.decode(BlockResourceLink, &v)
}

func (b ContentBlock) decode(typ string, v any) error {
	if b.Type != typ {
		return fmt.Errorf("sdk: a %s block is not an %s block", b.Type, typ)
	}
	if err := json.Unmarshal([]byte(b.JSON), v); err != nil {
		return fmt.Errorf("sdk: malformed %s block: %w", typ, err)
	}
	return nil
}
