package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/gofiber/fiber/v2"

	"svc/platform/fault"
)

// The one place where what the validator finds becomes the SPEC's 422
// {detail: [{loc, msg, type, input, ctx}]}: loc is ["body", field...],
// ["query", name] or ["path", name], and the types and messages are those
// the API has always answered (pydantic's), which clients and tests rely on.

func jsonTypeOf(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return "object"
}

// unstorable finds, in a body value, the strings of the schema's
// properties that PostgreSQL cannot store (IsStorable), skipping a location
// the schema already refused.
func unstorable(s *openapi3.Schema, v any, loc []any, refused []fault.FieldError) []fault.FieldError {
	var out []fault.FieldError
	switch v := v.(type) {
	case string:
		if !IsStorable(v) && !locIn(loc, refused) {
			out = append(out, notStorable(loc))
		}
	case map[string]any:
		for name, p := range s.Properties {
			if x, ok := v[name]; ok && p.Value != nil {
				out = append(out, unstorable(p.Value, x, append(loc[:len(loc):len(loc)], name), refused)...)
			}
		}
	case []any:
		if s.Items != nil && s.Items.Value != nil {
			for i, x := range v {
				out = append(out, unstorable(s.Items.Value, x, append(loc[:len(loc):len(loc)], i), refused)...)
			}
		}
	}
	return out
}

func locIn(loc []any, fields []fault.FieldError) bool {
	for _, f := range fields {
		if fmt.Sprint(f.Loc) == fmt.Sprint(loc) {
			return true
		}
	}
	return false
}

func notStorable(loc []any) fault.FieldError {
	return fault.FieldError{Loc: loc, Type: "string_type", Msg: "Input should be valid UTF-8 text without NUL characters"}
}

// bodyErrors maps openapi3filter's errors on a body to field errors.
func bodyErrors(err error) []fault.FieldError {
	var re *openapi3filter.RequestError
	if errors.As(err, &re) && errors.Is(re.Err, openapi3filter.ErrInvalidRequired) {
		return []fault.FieldError{{Loc: []any{"body"}, Msg: "Field required", Type: "missing"}}
	}
	return schemaErrors(err, []any{"body"}, nil)
}

// paramErrors maps openapi3filter's errors on a parameter to field errors
// at [in, name], with the raw value as the input.
func paramErrors(p *openapi3.Parameter, c *fiber.Ctx, err error) []fault.FieldError {
	loc := []any{p.In, p.Name}
	raw, _ := rawParam(c, p)
	var re *openapi3filter.RequestError
	if errors.As(err, &re) && errors.Is(re.Err, openapi3filter.ErrInvalidRequired) {
		return []fault.FieldError{{Loc: loc, Msg: "Field required", Type: "missing"}}
	}
	var pe *openapi3filter.ParseError
	if errors.As(err, &pe) || (re != nil && errors.Is(re.Err, openapi3filter.ErrInvalidEmptyValue)) {
		return []fault.FieldError{parseError(p, loc, raw)}
	}
	return schemaErrors(err, loc, raw)
}

func rawParam(c *fiber.Ctx, p *openapi3.Parameter) (string, bool) {
	if p.In == openapi3.ParameterInPath {
		return Param(c, p.Name), true
	}
	args := c.Context().QueryArgs()
	return string(args.Peek(p.Name)), args.Has(p.Name)
}

// parseError is the error of a parameter whose text is not of its type.
func parseError(p *openapi3.Parameter, loc []any, raw string) fault.FieldError {
	typ := "string"
	if p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Type != nil && len(*p.Schema.Value.Type) > 0 {
		typ = (*p.Schema.Value.Type)[0]
	}
	switch typ {
	case openapi3.TypeInteger:
		return fault.FieldError{Loc: loc, Type: "int_parsing", Input: raw, Msg: "Input should be a valid integer"}
	case openapi3.TypeNumber:
		return fault.FieldError{Loc: loc, Type: "float_parsing", Input: raw, Msg: "Input should be a valid number"}
	case openapi3.TypeBoolean:
		return fault.FieldError{Loc: loc, Type: "bool_parsing", Input: raw, Msg: "Input should be a valid boolean"}
	}
	return fault.FieldError{Loc: loc, Type: typ + "_type", Input: raw, Msg: "Input should be a valid " + typ}
}

// schemaErrors maps the schema errors inside err to field errors, each at
// base followed by the failing value's path. A parameter's errors carry its
// raw text as the input (input is nil for a body, whose value is used).
func schemaErrors(err error, base []any, input any) []fault.FieldError {
	var list []*openapi3.SchemaError
	collectSchemaErrors(err, &list)
	if len(list) == 0 {
		return []fault.FieldError{{Loc: base, Type: "value_error", Msg: err.Error()}}
	}
	out := make([]fault.FieldError, 0, len(list))
	for _, se := range list {
		out = append(out, schemaError(se, base, input))
	}
	return out
}

func collectSchemaErrors(err error, out *[]*openapi3.SchemaError) {
	var me openapi3.MultiError
	if errors.As(err, &me) {
		for _, e := range me {
			collectSchemaErrors(e, out)
		}
		return
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		*out = append(*out, se)
	}
}

// schemaError maps one failed keyword to the SPEC's field error: the types
// and messages are those the API has always answered (pydantic's).
func schemaError(se *openapi3.SchemaError, base []any, input any) fault.FieldError {
	loc := append([]any{}, base...)
	for _, k := range se.JSONPointer() {
		if n, err := strconv.Atoi(k); err == nil && n >= 0 {
			loc = append(loc, n) // an array index: no property of the API is all digits
		} else {
			loc = append(loc, k)
		}
	}
	s := se.Schema
	if input == nil {
		input = se.Value
		if n, ok := input.(json.Number); ok {
			input = string(n)
		}
	}
	switch se.SchemaField {
	case "required": // the pointer names the missing property
		return fault.FieldError{Loc: loc, Type: "missing", Msg: "Field required"}
	case "type":
		want := "object"
		if s != nil && s.Type != nil && len(*s.Type) > 0 {
			want = (*s.Type)[0]
		}
		return fault.FieldError{Loc: loc, Type: want + "_type", Msg: "Input should be a valid " + want}
	case "maxLength":
		return fault.FieldError{Loc: loc, Type: "string_too_long", Input: input,
			Msg: fmt.Sprintf("String should have at most %d characters", *s.MaxLength), Ctx: map[string]any{"max_length": *s.MaxLength}}
	case "minLength":
		return fault.FieldError{Loc: loc, Type: "string_too_short", Input: input,
			Msg: fmt.Sprintf("String should have at least %d characters", s.MinLength), Ctx: map[string]any{"min_length": s.MinLength}}
	case "pattern":
		return fault.FieldError{Loc: loc, Type: "string_pattern_mismatch", Input: input,
			Msg: fmt.Sprintf("String should match pattern '%s'", s.Pattern), Ctx: map[string]any{"pattern": s.Pattern}}
	case "enum":
		return fault.FieldError{Loc: loc, Type: "enum", Input: input,
			Msg: "Input should be " + enumList(s.Enum), Ctx: map[string]any{"expected": enumList(s.Enum)}}
	case "format":
		if s != nil && s.Format == "uuid" {
			return fault.FieldError{Loc: loc, Type: "uuid_parsing", Input: input, Msg: "Input should be a valid UUID"}
		}
		if s != nil && s.Format == "date-time" {
			return fault.FieldError{Loc: loc, Type: "datetime_parsing", Input: input,
				Msg: "Input should be an RFC 3339 timestamp with a time zone, such as 2026-01-02T03:04:05+00:00"}
		}
		return fault.FieldError{Loc: loc, Type: "value_error", Input: input, Msg: "Input should be a valid " + s.Format}
	case "minimum":
		return fault.FieldError{Loc: loc, Type: "greater_than_equal", Input: input,
			Msg: fmt.Sprintf("Input should be greater than or equal to %s", number(s.Min)), Ctx: map[string]any{"ge": intOr(s.Min)}}
	case "maximum":
		return fault.FieldError{Loc: loc, Type: "less_than_equal", Input: input,
			Msg: fmt.Sprintf("Input should be less than or equal to %s", number(s.Max)), Ctx: map[string]any{"le": intOr(s.Max)}}
	}
	return fault.FieldError{Loc: loc, Type: "value_error", Input: input, Msg: se.Reason}
}

// enumList says the allowed values as pydantic does: 'a', 'b' or 'c'.
func enumList(values []any) string {
	quoted := make([]string, 0, len(values))
	for _, v := range values {
		if v != nil {
			quoted = append(quoted, fmt.Sprintf("'%v'", v))
		}
	}
	if len(quoted) < 2 {
		return strings.Join(quoted, "")
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
}

func number(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'f', -1, 64)
}

func intOr(f *float64) any {
	if f == nil {
		return nil
	}
	if *f == float64(int64(*f)) {
		return int(*f)
	}
	return *f
}
