package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"svc/platform/fault"
)

// DecodeBody parses the JSON body into dst (a struct whose optional and
// required fields are pointers). A body that is not a JSON object, or a
// field of the wrong JSON type, is a 422 field error at ["body", field].
// Unknown fields are ignored.
func DecodeBody(c *fiber.Ctx, dst any) error {
	body := c.BodyRaw()
	if len(bytes.TrimSpace(body)) == 0 {
		return fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Field required", Type: "missing"})
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fault.Validation(fault.FieldError{
				Loc: append([]any{"body"}, splitField(te.Field)...), Msg: "Input should be a valid " + jsonKind(te.Type.String()),
				Type: jsonKind(te.Type.String()) + "_type",
			})
		}
		return fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body is not a valid JSON object: " + err.Error(), Type: "json_invalid"})
	}
	if dec.More() {
		return fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body has data after the JSON object", Type: "json_invalid"})
	}
	return nil
}

func splitField(f string) []any {
	out := []any{}
	for _, p := range strings.Split(f, ".") {
		out = append(out, p)
	}
	return out
}

func jsonKind(goType string) string {
	switch {
	case strings.Contains(goType, "string"):
		return "string"
	case strings.Contains(goType, "int"):
		return "integer"
	case strings.Contains(goType, "bool"):
		return "boolean"
	default:
		return "object"
	}
}

// Fields collects field errors for one request; Err returns nil when none.
type Fields struct{ list []fault.FieldError }

// Add records an error at loc.
func (f *Fields) Add(loc []any, typ, msg string, input any) {
	f.list = append(f.list, fault.FieldError{Loc: loc, Msg: msg, Type: typ, Input: input})
}

// Required records a missing field unless present.
func (f *Fields) Required(present bool, loc ...any) bool {
	if !present {
		f.Add(loc, "missing", "Field required", nil)
	}
	return present
}

// Length checks that s has from min to max characters.
func (f *Fields) Length(s string, min, max int, loc ...any) bool {
	n := utf8.RuneCountInString(s)
	switch {
	case n < min:
		f.list = append(f.list, fault.FieldError{Loc: loc, Type: "string_too_short", Input: s,
			Msg: fmt.Sprintf("String should have at least %d characters", min), Ctx: map[string]any{"min_length": min}})
		return false
	case n > max:
		f.list = append(f.list, fault.FieldError{Loc: loc, Type: "string_too_long", Input: s,
			Msg: fmt.Sprintf("String should have at most %d characters", max), Ctx: map[string]any{"max_length": max}})
		return false
	}
	return true
}

// Storable checks that s is text PostgreSQL can store: valid UTF-8 without
// NUL, which a percent-encoded path or query can otherwise carry.
func (f *Fields) Storable(s string, loc ...any) bool {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		f.Add(loc, "string_type", "Input should be valid UTF-8 text without NUL characters", nil)
		return false
	}
	return true
}

// Err returns the collected errors as a 422, or nil.
func (f *Fields) Err() error {
	if len(f.list) == 0 {
		return nil
	}
	return fault.Validation(f.list...)
}

// QueryInt reads an optional integer query parameter within [min, max],
// returning def when it is absent. A bad value is a 422 at ["query", name].
func QueryInt(c *fiber.Ctx, name string, def, min, max int) (int, error) {
	raw := c.Query(name)
	if raw == "" && !c.Context().QueryArgs().Has(name) {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		return 0, fault.Validation(fault.FieldError{Loc: []any{"query", name}, Type: "int_parsing", Input: raw,
			Msg: "Input should be a valid integer"})
	}
	if n < min {
		return 0, fault.Validation(fault.FieldError{Loc: []any{"query", name}, Type: "greater_than_equal", Input: raw,
			Msg: fmt.Sprintf("Input should be greater than or equal to %d", min), Ctx: map[string]any{"ge": min}})
	}
	if n > max {
		return 0, fault.Validation(fault.FieldError{Loc: []any{"query", name}, Type: "less_than_equal", Input: raw,
			Msg: fmt.Sprintf("Input should be less than or equal to %d", max), Ctx: map[string]any{"le": max}})
	}
	return n, nil
}

// QueryEnum reads an optional query parameter that must be one of allowed.
func QueryEnum(c *fiber.Ctx, name string, allowed ...string) (string, error) {
	raw := c.Query(name)
	if raw == "" {
		return "", nil
	}
	for _, a := range allowed {
		if raw == a {
			return raw, nil
		}
	}
	return "", fault.Validation(fault.FieldError{Loc: []any{"query", name}, Type: "enum", Input: raw,
		Msg: "Input should be " + strings.Join(allowed, ", "), Ctx: map[string]any{"expected": strings.Join(allowed, ", ")}})
}

// Param returns the path parameter name, percent-decoded and copied (fiber
// reuses its buffers).
func Param(c *fiber.Ctx, name string) string {
	raw := c.Params(name)
	if v, err := url.PathUnescape(raw); err == nil {
		return v
	}
	return strings.Clone(raw)
}
