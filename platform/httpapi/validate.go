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
	"strings"
	"time"

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
//   - A path parameter that only names what the handler looks up (of
//     format uuid, or text with no bound at all, such as an event id): the
//     SPEC answers 404 for anything that is not a known id, which the
//     handler's lookup decides.
//   - Unknown query parameters: a schema cannot close a parameter list. An
//     operation marked "x-closed-query": true refuses every parameter it
//     does not document, in the same 422 as the others; the operations
//     marked are the lists that refuse a misspelt filter.
//
// A date-time parameter is RFC 3339 with a time zone, as time.Parse reads
// it, and a "+" that form decoding turned into a space is read as the "+"
// it was (QueryTime).
type Validator struct {
	doc     *openapi3.T
	options openapi3filter.Options
}

// LoadDocument parses spec, an OpenAPI document (JSON), and validates it.
func LoadDocument(ctx context.Context, spec []byte) (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: load: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("openapi.json: invalid: %w", err)
	}
	return doc, nil
}

// NewValidator makes the validator of spec, an OpenAPI document (JSON),
// parsed and validated once (LoadDocument).
func NewValidator(ctx context.Context, spec []byte) (*Validator, error) {
	doc, err := LoadDocument(ctx, spec)
	if err != nil {
		return nil, err
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
			openapi3.WithStringFormatValidator("date-time", openapi3.NewCallbackValidator(func(s string) error {
				_, err := time.Parse(time.RFC3339Nano, s)
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
	query  bool // some of params are in the query
	// closed lists the documented query parameters when the operation
	// refuses any other ("x-closed-query"); nil when it does not.
	closed []string
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
	var names []string // the query parameters, in the document's order
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			p := ref.Value
			switch {
			case p.In == openapi3.ParameterInPath && lookupOnly(p):
			case p.In == openapi3.ParameterInPath, p.In == openapi3.ParameterInQuery:
				o.params = append(o.params, p)
				o.query = o.query || p.In == openapi3.ParameterInQuery
			}
			if p.In == openapi3.ParameterInQuery {
				names = append(names, p.Name)
			}
		}
	}
	if closed, _ := op.Extensions["x-closed-query"].(bool); closed {
		o.closed = append([]string{}, names...)
		o.query = true
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

// lookupOnly reports a path parameter that only names what the handler
// looks up: of format uuid, or text with no bound at all. Anything that is
// not a known id is 404, whatever its text.
func lookupOnly(p *openapi3.Parameter) bool {
	if p.Schema == nil || p.Schema.Value == nil {
		return true
	}
	s := p.Schema.Value
	if s.Format == "uuid" {
		return true
	}
	return s.Type.Is(openapi3.TypeString) && s.Format == "" && s.Pattern == "" && len(s.Enum) == 0 &&
		s.MinLength == 0 && s.MaxLength == nil
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
	req := &http.Request{Method: c.Method(), URL: &url.URL{}, Header: http.Header{}, Body: http.NoBody}
	in := &openapi3filter.RequestValidationInput{Request: req, Options: &o.v.options}
	if o.query {
		// The query as fiber parses it, which is what the handler reads.
		in.QueryParams = url.Values{}
		c.Context().QueryArgs().VisitAll(func(k, v []byte) { in.QueryParams.Add(string(k), string(v)) })
	}
	var fields []fault.FieldError
	for _, p := range o.params {
		if p.In == openapi3.ParameterInQuery && p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Format == "date-time" {
			// A "+" sent unencoded in a timestamp arrives as a space.
			for i, v := range in.QueryParams[p.Name] {
				in.QueryParams[p.Name][i] = strings.ReplaceAll(v, " ", "+")
			}
		}
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
	if o.closed != nil {
		var fe *fault.Error
		if errors.As(OnlyQuery(c, o.closed...), &fe) {
			fields = append(fields, fe.Fields...)
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
