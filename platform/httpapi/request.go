package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"svc/platform/fault"
)

// DecodeBody parses the JSON body into dst (a struct whose optional and
// required fields are pointers). A body that is not a JSON object, or a
// field of the wrong JSON type, is a 422 field error at ["body", field].
// Unknown fields are ignored, but a key given twice, or a field's name in
// another case ("External_User_Id"), is a 422 too: Go's decoder would take
// the last value and match names without regard to case, so a check made
// upstream on the first value, or on the exact name, would not be what the
// service acts on.
func DecodeBody(c *fiber.Ctx, dst any) error {
	body := c.BodyRaw()
	if len(bytes.TrimSpace(body)) == 0 {
		return errBodyMissing
	}
	if !jsonContent(c.Get(fiber.HeaderContentType)) {
		return errNotJSON
	}
	if err := strictKeys(body, dst); err != nil {
		return err
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
		if errors.As(err, &te) {
			// The whole body has the wrong type: say which, not Go's name
			// for the request model.
			return fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body must be a JSON object, not " + te.Value, Type: "model_type"})
		}
		return fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body is not a valid JSON object: " + err.Error(), Type: "json_invalid"})
	}
	if dec.More() {
		return fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body has data after the JSON object", Type: "json_invalid"})
	}
	return nil
}

var (
	errBodyMissing = fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Field required", Type: "missing"})
	errNotJSON     = fiber.NewError(fiber.StatusUnsupportedMediaType, "send the body as JSON with Content-Type: application/json")
)

// jsonContent accepts application/json (with parameters, or any +json
// type) and a missing Content-Type; a form, text or XML is refused, so a
// body is never taken for JSON by accident.
func jsonContent(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// strictKeys refuses, in a top-level JSON object, a key given twice and a
// key that names one of dst's fields in another case. "Another case" is
// what encoding/json matches: Unicode simple case folding (foldKey), so
// "external_uſer_id" (U+017F) or "K" (U+212A) is refused as the other-case
// name it would be decoded as. Anything that is not an object is left to
// the decoder's own error.
func strictKeys(body []byte, dst any) error {
	names := map[string]string{} // folded -> the exact name
	if t := reflect.TypeOf(dst); t != nil && t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		for i := 0; i < t.Elem().NumField(); i++ {
			name, _, _ := strings.Cut(t.Elem().Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				names[foldKey(name)] = name
			}
		}
	}
	if err := strictKeyNames(body, names); err != nil {
		return err
	}
	return nil
}

// strictKeyNames is strictKeys with the fields' names given, folded
// (foldKey) to the exact name.
func strictKeyNames(body []byte, names map[string]string) *fault.Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	var fields []fault.FieldError
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, ok := tok.(string)
		if !ok {
			return nil
		}
		switch exact, known := names[foldKey(key)]; {
		case seen[key]:
			fields = append(fields, fault.FieldError{Loc: []any{"body", key}, Type: "duplicate_key",
				Msg: "Key given more than once: send each field once"})
		case known && exact != key:
			fields = append(fields, fault.FieldError{Loc: []any{"body", key}, Type: "field_name",
				Msg: "Field names are case-sensitive: this field is " + exact})
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	if len(fields) > 0 {
		return fault.Validation(fields...)
	}
	return nil
}

// foldKey folds a name as encoding/json does to match a key to a field:
// two names fold alike exactly when bytes.EqualFold holds, that is under
// Unicode simple folding, where "ſ" (U+017F) is an "s" and the Kelvin sign
// "K" (U+212A) a "k". Each rune becomes the smallest rune of its fold orbit.
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		for {
			next := unicode.SimpleFold(r)
			if next <= r {
				r = next
				break
			}
			r = next
		}
		b.WriteRune(r)
	}
	return b.String()
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

// IsStorable reports text PostgreSQL can store: valid UTF-8 without NUL,
// which a percent-encoded path or query, or a JSON escape, can otherwise
// carry. It is the one check every string input goes through.
func IsStorable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

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

// QueryTime reads an optional RFC 3339 timestamp query parameter (with a
// time zone: "Z" or an offset such as +00:00), returning nil when it is
// absent. A "+" sent unencoded arrives as a space (form encoding) and is
// read as the "+" it was. A bad value is a 422 at ["query", name].
func QueryTime(c *fiber.Ctx, name string) (*time.Time, error) {
	args := c.Context().QueryArgs()
	if !args.Has(name) {
		return nil, nil
	}
	raw := string(args.Peek(name)) // a copy: fiber reuses its buffers
	t, err := time.Parse(time.RFC3339Nano, strings.ReplaceAll(raw, " ", "+"))
	if err != nil {
		return nil, fault.Validation(fault.FieldError{Loc: []any{"query", name}, Type: "datetime_parsing", Input: raw,
			Msg: "Input should be an RFC 3339 timestamp with a time zone, such as 2026-01-02T03:04:05+00:00"})
	}
	return &t, nil
}

// OnlyQuery refuses query parameters other than allowed, each as a 422
// field error: a misspelt filter ("stauts") would otherwise be ignored
// and the caller would read an unfiltered list as if it were filtered.
func OnlyQuery(c *fiber.Ctx, allowed ...string) error {
	var fields []fault.FieldError
	c.Context().QueryArgs().VisitAll(func(k, _ []byte) {
		name := string(k)
		for _, a := range allowed {
			if name == a {
				return
			}
		}
		fields = append(fields, fault.FieldError{Loc: []any{"query", name}, Type: "extra_forbidden",
			Msg: "Unknown query parameter; this list takes " + strings.Join(allowed, ", ")})
	})
	if len(fields) > 0 {
		return fault.Validation(fields...)
	}
	return nil
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
