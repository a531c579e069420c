package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"svc/platform/fault"
)

// Validator checks requests against the service's OpenAPI document with
// kin-openapi's openapi3filter: the path and query parameters and the JSON
// body of each route's operation, so that the document is the one statement
// of what a request may carry and handlers keep only what a schema cannot
// say (business rules, destinations, balances, the bounds of an amount per
// asset).
//
// The document is parsed and validated once (NewValidator); each route
// finds its operation once, when it is registered (Router), and a request
// is then checked against that operation's compiled parameters and body
// schema, without routing it again.
//
// What the validator does not take from the document, and why:
//
//   - Header parameters: the Idempotency-Key is read, and its absence
//     answered 400, by the idempotency middleware, which runs first.
//   - A path parameter of format uuid: the SPEC answers 404 for anything
//     that is not a known id, which the handler's lookup decides.
//   - Unknown query parameters: a schema cannot close a parameter list;
//     OnlyQuery refuses them where a list is filtered.
type Validator struct {
	doc     *openapi3.T
	options openapi3filter.Options
}

// NewValidator parses and validates spec, an OpenAPI document (JSON).
func NewValidator(ctx context.Context, spec []byte) (*Validator, error) {
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("openapi: load: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("openapi: invalid: %w", err)
	}
	return &Validator{doc: doc, options: openapi3filter.Options{
		MultiError:          true,
		SkipSettingDefaults: true, // a handler applies its own default: the body is never rewritten
		// The formats the document's request parameters and bodies use
		// and kin-openapi does not check by itself.
		SchemaValidationOptions: []openapi3.SchemaValidationOption{
			openapi3.WithStringFormatValidator("uuid", openapi3.NewCallbackValidator(func(s string) error {
				_, err := uuid.Parse(s)
				return err
			})),
		},
	}}, nil
}

// Operation is one route's compiled check: the operation's path and query
// parameters and its JSON request body, resolved from the document once.
type Operation struct {
	v      *Validator
	name   string // "POST /v1/deposits", for errors
	params []*openapi3.Parameter
	body   *openapi3.RequestBody
	schema *openapi3.Schema  // of application/json; nil without a body
	fields map[string]string // the body's properties: folded -> exact name
}

// Operation returns the check of method on a fiber route path
// ("/v1/deposits/:deposit_id"), or an error when the document does not
// describe it.
func (v *Validator) Operation(method, path string) (*Operation, error) {
	item := v.doc.Paths.Value(openAPIPath(path))
	if item == nil {
		return nil, fmt.Errorf("openapi: %s %s is not in the document", method, path)
	}
	op := item.GetOperation(method)
	if op == nil {
		return nil, fmt.Errorf("openapi: %s %s is not in the document", method, path)
	}
	o := &Operation{v: v, name: method + " " + path}
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			p := ref.Value
			switch {
			case p.In == openapi3.ParameterInPath && p.Schema != nil && p.Schema.Value.Format == "uuid":
			case p.In == openapi3.ParameterInPath, p.In == openapi3.ParameterInQuery:
				o.params = append(o.params, p)
			}
		}
	}
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		o.body = op.RequestBody.Value
		mt := o.body.Content.Get(fiber.MIMEApplicationJSON)
		if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
			return nil, fmt.Errorf("openapi: %s: the request body has no application/json schema", o.name)
		}
		o.schema = mt.Schema.Value
		o.fields = map[string]string{}
		for name := range o.schema.Properties {
			o.fields[foldKey(name)] = name
		}
	}
	return o, nil
}

// openAPIPath turns a fiber route path into the document's template:
// ":name" segments become "{name}".
func openAPIPath(path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + strings.TrimSuffix(s[1:], "?") + "}"
		}
	}
	return strings.Join(segs, "/")
}

// Check validates the request's parameters, and its body when the
// operation has one. Every error is a 422 field error (fault.Validation)
// but a refused Content-Type (415).
func (o *Operation) Check(c *fiber.Ctx) error {
	if o == nil {
		return fault.New(fault.Internal, "the route has no operation of openapi.json to check its request against")
	}
	ctx := c.UserContext()
	req := &http.Request{Method: c.Method(), URL: &url.URL{RawQuery: string(c.Request().URI().QueryString())},
		Header: http.Header{}, Body: http.NoBody}
	in := &openapi3filter.RequestValidationInput{Request: req, Options: &o.v.options}
	var fields []fault.FieldError
	for _, p := range o.params {
		if p.In == openapi3.ParameterInPath {
			if in.PathParams == nil {
				in.PathParams = map[string]string{}
			}
			in.PathParams[p.Name] = Param(c, p.Name)
		}
		if value, ok := paramValue(c, p); ok && !IsStorable(value) {
			fields = append(fields, notStorable([]any{p.In, p.Name}))
			continue
		}
		if err := openapi3filter.ValidateParameter(ctx, in, p); err != nil {
			fields = append(fields, paramErrors(p, c, err)...)
		}
	}
	if o.schema != nil {
		bf, err := o.checkBody(ctx, c, in)
		if err != nil {
			return err
		}
		fields = append(fields, bf...)
	}
	if len(fields) > 0 {
		return fault.Validation(fields...)
	}
	return nil
}

// paramValue is a free-text parameter's raw value as the request has it,
// for the storable-text rule (a parameter with a format or an enum is
// refused by its own check).
func paramValue(c *fiber.Ctx, p *openapi3.Parameter) (string, bool) {
	if s := p.Schema; s == nil || s.Value == nil || !s.Value.Type.Is(openapi3.TypeString) || s.Value.Format != "" || len(s.Value.Enum) > 0 {
		return "", false
	}
	if p.In == openapi3.ParameterInPath {
		return Param(c, p.Name), true
	}
	args := c.Context().QueryArgs()
	if !args.Has(p.Name) {
		return "", false
	}
	return string(args.Peek(p.Name)), true
}

// checkBody applies the body rules: present when required, JSON, one
// object whose keys are each given once and in their exact case, then the
// schema; and every string it carries storable.
//
// A body refused before its schema (missing, not JSON, a key twice) is
// returned as the error it is, alone, as DecodeBody does.
func (o *Operation) checkBody(ctx context.Context, c *fiber.Ctx, in *openapi3filter.RequestValidationInput) ([]fault.FieldError, error) {
	body := c.BodyRaw()
	if len(body) == 0 && !o.body.Required {
		return nil, nil
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errBodyMissing
	}
	if !jsonContent(c.Get(fiber.HeaderContentType)) {
		return nil, errNotJSON
	}
	if err := strictKeyNames(body, o.fields); err != nil {
		return nil, err
	}
	var value any
	// Decoded as openapi3filter decodes it, for the storable rule and for
	// the type of a wrong body; the schema check itself is openapi3filter's.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&value); err != nil {
		return nil, fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body is not a valid JSON object: " + err.Error(), Type: "json_invalid"})
	}
	if dec.More() {
		return nil, fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body has data after the JSON object", Type: "json_invalid"})
	}
	if _, ok := value.(map[string]any); !ok && o.schema.Type.Is(openapi3.TypeObject) {
		return nil, fault.Validation(fault.FieldError{Loc: []any{"body"}, Msg: "Body must be a JSON object, not " + jsonTypeOf(value), Type: "model_type"})
	}
	in.Request.Header.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	in.Request.ContentLength = int64(len(body))
	var fields []fault.FieldError
	if err := openapi3filter.ValidateRequestBody(ctx, in, o.body); err != nil {
		fields = bodyErrors(err)
	}
	return append(fields, unstorable(o.schema, value, []any{"body"}, fields)...), nil
}

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

// Router returns r with every route registered through it checked against
// its operation: the check is resolved at registration (a route the
// document does not describe panics, as fiber does on a bad route) and runs
// right before the route's handler, after its middleware.
//
// An operation without a request body is checked there. One with a body is
// checked by the handler's Bind, so that the check runs inside whatever
// the handler is wrapped in (an Idempotency-Key claimed in the handler's
// first statement stores a refusal as the key's answer, as before).
func (v *Validator) Router(r fiber.Router) fiber.Router {
	prefix := ""
	if g, ok := r.(*fiber.Group); ok {
		prefix = g.Prefix
	}
	return checkedRouter{Router: r, v: v, prefix: prefix}
}

type checkedRouter struct {
	fiber.Router
	v      *Validator
	prefix string
}

func (r checkedRouter) Get(path string, h ...fiber.Handler) fiber.Router {
	return r.Router.Get(path, r.with(fiber.MethodGet, path, h)...)
}

func (r checkedRouter) Post(path string, h ...fiber.Handler) fiber.Router {
	return r.Router.Post(path, r.with(fiber.MethodPost, path, h)...)
}

func (r checkedRouter) Put(path string, h ...fiber.Handler) fiber.Router {
	return r.Router.Put(path, r.with(fiber.MethodPut, path, h)...)
}

func (r checkedRouter) Patch(path string, h ...fiber.Handler) fiber.Router {
	return r.Router.Patch(path, r.with(fiber.MethodPatch, path, h)...)
}

func (r checkedRouter) Delete(path string, h ...fiber.Handler) fiber.Router {
	return r.Router.Delete(path, r.with(fiber.MethodDelete, path, h)...)
}

// with puts the operation's check before the last of handlers.
func (r checkedRouter) with(method, path string, handlers []fiber.Handler) []fiber.Handler {
	o, err := r.v.Operation(method, strings.TrimSuffix(r.prefix, "/")+path)
	if err != nil {
		panic(err)
	}
	n := len(handlers)
	out := make([]fiber.Handler, 0, n+1)
	out = append(out, handlers[:n-1]...)
	return append(out, o.handler, handlers[n-1])
}

type operationKey struct{}

func (o *Operation) handler(c *fiber.Ctx) error {
	if o.schema != nil {
		c.Locals(operationKey{}, o)
		return c.Next()
	}
	if err := o.Check(c); err != nil {
		return err
	}
	return c.Next()
}

// Bind checks a request with a body against its route's operation
// (Router), then decodes the body, if any, into dst. It is how a handler
// registered through Router reads its body; outside one it is a 500.
func Bind(c *fiber.Ctx, dst any) error {
	o, _ := c.Locals(operationKey{}).(*Operation)
	if err := o.Check(c); err != nil {
		return err
	}
	body := c.BodyRaw()
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, dst); err != nil {
		// The schema admitted a body the handler's model does not: the
		// document and the model disagree.
		return fault.Wrap(fault.Internal, o.name+": the body fits openapi.json but not the handler's model", err)
	}
	return nil
}
