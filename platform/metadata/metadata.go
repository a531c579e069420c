// Package metadata owns the free-form labels a platform attaches to its
// resources (deposits, withdrawals, transfers, holds): the Metadata map and
// its limits, which are Stripe's, and the length of a client reference.
//
// The OpenAPI document says the same limits in the shared schemas
// Metadata and ClientReference, but the request validator does not check
// everything a schema can say about a map (the length of its keys), nor
// whether its keys and values are text PostgreSQL can store, so a handler
// calls Check on every metadata it accepts.
package metadata

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	"svc/platform/fault"
	"svc/platform/httpapi"
)

// The limits (Stripe's).
const (
	MaxKeys        = 20  // keys in one metadata
	MaxKeyLength   = 40  // characters of a key (at least 1)
	MaxValueLength = 500 // characters of a value (may be empty)

	// MaxClientReference is the longest client reference, in characters
	// (at least 1). A client reference is unique per resource type; the
	// schema ClientReference says its length, and the request validator
	// checks it and that it is storable text, so it needs no Go check.
	MaxClientReference = 255
)

// Metadata is a resource's labels: string keys to string values. Its
// zero value (nil) is empty and marshals as {} to JSON and to the
// database, so a resource always shows an object.
type Metadata map[string]string

// MarshalJSON writes a nil map as {}.
func (m Metadata) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(map[string]string(m))
}

// Value stores m as a JSON object (a jsonb column).
func (m Metadata) Value() (driver.Value, error) {
	b, err := m.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// Scan reads a JSON object from the database; NULL reads as empty.
func (m *Metadata) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*m = Metadata{}
		return nil
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("metadata: cannot scan %T", src)
	}
	out := Metadata{}
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	*m = out
	return nil
}

// Check reports whether m keeps the limits, as a 422 whose field errors
// sit at loc followed by the offending key (["body", "metadata", "k"]), or
// at loc itself for too many keys. Every bad key is reported, in key order.
func (m Metadata) Check(loc ...string) error {
	at := func(extra ...string) []any {
		out := make([]any, 0, len(loc)+len(extra))
		for _, l := range loc {
			out = append(out, l)
		}
		for _, e := range extra {
			out = append(out, e)
		}
		return out
	}
	var fields []fault.FieldError
	if len(m) > MaxKeys {
		fields = append(fields, fault.FieldError{Loc: at(), Type: "too_long",
			Msg: fmt.Sprintf("Metadata should have at most %d keys, not %d", MaxKeys, len(m)),
			Ctx: map[string]any{"max_length": MaxKeys, "actual_length": len(m)}})
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch n := utf8.RuneCountInString(k); {
		case !httpapi.IsStorable(k):
			fields = append(fields, fault.FieldError{Loc: at(k), Type: "string_type",
				Msg: "Metadata key should be valid UTF-8 text without NUL characters"})
			continue
		case n < 1:
			fields = append(fields, fault.FieldError{Loc: at(k), Type: "string_too_short", Input: k,
				Msg: "Metadata key should have at least 1 character", Ctx: map[string]any{"min_length": 1}})
			continue
		case n > MaxKeyLength:
			fields = append(fields, fault.FieldError{Loc: at(k), Type: "string_too_long", Input: k,
				Msg: fmt.Sprintf("Metadata key should have at most %d characters", MaxKeyLength),
				Ctx: map[string]any{"max_length": MaxKeyLength}})
			continue
		}
		switch {
		case !httpapi.IsStorable(v):
			fields = append(fields, fault.FieldError{Loc: at(k), Type: "string_type",
				Msg: "Input should be valid UTF-8 text without NUL characters"})
		case utf8.RuneCountInString(v) > MaxValueLength:
			fields = append(fields, fault.FieldError{Loc: at(k), Type: "string_too_long", Input: v,
				Msg: fmt.Sprintf("String should have at most %d characters", MaxValueLength),
				Ctx: map[string]any{"max_length": MaxValueLength}})
		}
	}
	if len(fields) == 0 {
		return nil
	}
	return fault.Validation(fields...)
}
