// Package openapitest checks API test traffic against the committed
// openapi.json: every response that passes through the end-to-end harness
// must belong to a documented operation and match its documented status,
// headers and body. The document is loaded and validated once per test
// binary.
//
// The check is stricter than the published document in one way: objects
// that list their properties are treated as closed (additionalProperties:
// false), so a field the code sends but the document does not describe fails
// the test. The published document stays open so that clients tolerate
// fields a later version adds.
//
// kin-openapi (v0.152.0) validates OpenAPI 3.1 documents with a JSON Schema
// 2020-12 validator, and falls back to its own validator for schemas that
// use no 2020-only keyword; both handle the 3.1 constructs the document uses
// (type arrays such as ["string","null"], null in enum, oneOf, pattern), and
// the package's tests prove each of them rejects what it should.
package openapitest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"svc/platform/httpapi"
	"svc/platform/openapi"
)

// ErrUndocumented is returned for a response to a method and path that
// openapi.json does not describe.
var ErrUndocumented = errors.New("undocumented route")

type checker struct {
	doc    *openapi3.T // as published
	strict *openapi3.T // closed objects, see the package doc
	router routers.Router
}

var (
	loadOnce sync.Once
	loaded   *checker
	loadErr  error
)

// Load parses and validates openapi.Spec. It is what every check uses, and
// what the service's request validator uses (httpapi.LoadDocument).
func Load(ctx context.Context, spec []byte) (*openapi3.T, error) {
	return httpapi.LoadDocument(ctx, spec)
}

func load() (*checker, error) {
	loadOnce.Do(func() {
		ctx := context.Background()
		c := &checker{}
		if c.doc, loadErr = Load(ctx, openapi.Spec); loadErr != nil {
			return
		}
		if c.strict, loadErr = Load(ctx, openapi.Spec); loadErr != nil {
			return
		}
		closeObjects(c.strict)
		// Servers is "/", so the router matches any host: the tests' API
		// listens on a random loopback port.
		if c.router, loadErr = gorillamux.NewRouter(c.strict); loadErr != nil {
			loadErr = fmt.Errorf("openapi.json: router: %w", loadErr)
			return
		}
		loaded = c
	})
	return loaded, loadErr
}

// Document returns the parsed, validated openapi.json as published. It is
// shared: callers must not change it.
func Document() (*openapi3.T, error) {
	c, err := load()
	if err != nil {
		return nil, err
	}
	return c.doc, nil
}

// ValidateResponse fails t when resp (with body) does not match the
// operation of req in openapi.json, or when openapi.json has no operation
// for req's method and path (see CheckResponse).
func ValidateResponse(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, body []byte) {
	t.Helper()
	if err := CheckResponse(req, resp.StatusCode, resp.Header, body); err != nil {
		const max = 2048
		shown := body
		if len(shown) > max {
			shown = append(shown[:max:max], "..."...)
		}
		t.Errorf("openapi.json: %s %s -> %d: %v\nbody: %s", req.Method, req.URL.Path, resp.StatusCode, err, shown)
	}
}

// CheckResponse returns why a response with status, header and body is not
// what openapi.json documents for req, or nil when it is.
//
// A method and path the document does not describe is ErrUndocumented,
// with two exceptions: the service's catch-all answers to an unknown route,
// 404 with the Error body, and to a documented path with another method,
// 405 with Allow and the Error body, are what the document says such
// requests get, so tests may probe them. HEAD is not checked (fiber answers it for every
// GET route, without a body).
func CheckResponse(req *http.Request, status int, header http.Header, body []byte) error {
	c, err := load()
	if err != nil {
		return err
	}
	if req.Method == http.MethodHead {
		return nil
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if !errors.Is(err, routers.ErrPathNotFound) && !errors.Is(err, routers.ErrMethodNotAllowed) {
			return fmt.Errorf("find route: %w", err)
		}
		if status == http.StatusNotFound {
			return c.checkUnknownRoute(header, body)
		}
		if status == http.StatusUnauthorized && strings.HasPrefix(req.URL.Path, "/v1/") {
			return c.checkUnknownRoute(header, body) // authentication comes before routing under /v1
		}
		if status == http.StatusMethodNotAllowed { // the document's router is case-sensitive; fiber's is not
			if header.Get("Allow") == "" {
				return fmt.Errorf("405 for %s %s without an Allow header", req.Method, req.URL.Path)
			}
			return c.checkUnknownRoute(header, body)
		}
		return fmt.Errorf("%w: %s %s is not in openapi.json", ErrUndocumented, req.Method, req.URL.Path)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true, // a status the operation does not document fails
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

func (c *checker) checkUnknownRoute(header http.Header, body []byte) error {
	if cc := header.Get("Cache-Control"); cc != "no-store" {
		return fmt.Errorf("unknown route: Cache-Control %q, want no-store", cc)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("unknown route: body is not JSON: %w", err)
	}
	s := c.strict.Components.Schemas["Error"]
	if s == nil || s.Value == nil {
		return errors.New("openapi.json has no Error schema")
	}
	if err := s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("unknown route: 404 body is not an Error: %w", err)
	}
	return nil
}

// closeObjects sets additionalProperties: false on every object schema that
// lists properties and says nothing about additional ones. Free-form objects
// (no properties, such as an event's payload) stay open.
func closeObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			no := false
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		walk(s.Not)
		for _, list := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf, s.AllOf} {
			for _, x := range list {
				walk(x)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	walkContent := func(content openapi3.Content) {
		for _, mt := range content {
			if mt != nil {
				walk(mt.Schema)
			}
		}
	}
	for _, r := range doc.Components.Responses {
		if r.Value != nil {
			walkContent(r.Value.Content)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				if r.Value != nil {
					walkContent(r.Value.Content)
				}
			}
		}
	}
}
