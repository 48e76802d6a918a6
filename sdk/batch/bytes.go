package batch

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Bytes is a byte string on the wire: {"text": "..."} when it is valid UTF-8, else
// {"base64": "..."} (standard encoding, padded); null when nil.
type Bytes []byte

// bytesWire is the JSON form of Bytes.
type bytesWire struct {
	Text   *string `json:"text,omitempty"`
	Base64 *string `json:"base64,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("null"), nil
	}
	return json.Marshal(toWire(b))
}

func toWire(b []byte) bytesWire {
	s := string(b)
	if utf8.ValidString(s) {
		return bytesWire{Text: &s}
	}
	e := base64.StdEncoding.EncodeToString(b)
	return bytesWire{Base64: &e}
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*b = nil
		return nil
	}
	var w bytesWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	v, err := fromWire(w)
	*b = v
	return err
}

func fromWire(w bytesWire) ([]byte, error) {
	switch {
	case w.Text != nil && w.Base64 != nil:
		return nil, errors.New("both text and base64")
	case w.Text != nil:
		return []byte(*w.Text), nil
	case w.Base64 != nil:
		v, err := base64.StdEncoding.DecodeString(*w.Base64)
		if err != nil {
			return nil, err
		}
		if v == nil {
			v = []byte{}
		}
		return v, nil
	}
	return nil, nil
}

// Header is a Kafka record header: {"key": "...", "text"|"base64": "..."}; a nil value has neither.
type Header struct {
	// Key is the header's name.
	Key string
	// Value is the header's value.
	Value []byte
}

type headerWire struct {
	Key string `json:"key"`
	bytesWire
}

// MarshalJSON implements json.Marshaler.
func (h Header) MarshalJSON() ([]byte, error) {
	w := headerWire{Key: h.Key}
	if h.Value != nil {
		w.bytesWire = toWire(h.Value)
	}
	return json.Marshal(w)
}

// UnmarshalJSON implements json.Unmarshaler.
func (h *Header) UnmarshalJSON(data []byte) error {
	var w headerWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	v, err := fromWire(w.bytesWire)
	if err != nil {
		return err
	}
	*h = Header{Key: w.Key, Value: v}
	return nil
}
