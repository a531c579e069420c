// Package httpapi is the service's HTTP frame (fiber v2): recover, request
// ids, an access log, Cache-Control: no-store and Svc-Interface-Version on
// every response, the client's address behind trusted proxies (Proxies), and the one
// error handler that turns fault kinds into the SPEC's statuses and bodies.
// Modules register their routes on the *fiber.App it returns and return
// errors from their handlers; none of them writes an error body itself.
package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/contrib/otelfiber/v2"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/middleware/requestid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/tracing"
)

// RequestIDHeader carries the request id in and out.
const RequestIDHeader = "X-Request-Id"

// Options configures New.
type Options struct {
	BodyLimit int
	Log       *slog.Logger
	// Observe, when set, is told of every answered request (metrics):
	// route is the matched route's template ("/v1/deposits/:deposit_id"),
	// never the raw path, or UnmatchedRoute.
	Observe func(method, route string, status int, took time.Duration)
	// Tracer, when set, makes a server span of every request, named by
	// its method and route template ("POST /v1/deposits"), continuing the
	// caller's traceparent; handlers find it in c.UserContext(). Nil
	// installs nothing.
	Tracer trace.TracerProvider
	// InterfaceVersion, when set, is sent on every response, errors and
	// unknown routes included, as InterfaceVersionHeader: info.version of
	// the OpenAPI document the service speaks.
	InterfaceVersion string
}

// InterfaceVersionHeader carries Options.InterfaceVersion.
const InterfaceVersionHeader = "Svc-Interface-Version"

// UnmatchedRoute is the route Observe is given for a request no route
// served (404, 405).
const UnmatchedRoute = "unmatched"

// New returns a fiber app with the service's middleware and error handler.
// Register routes on it, then call NotFound last.
func New(o Options) *fiber.App {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = 1 << 20
	}
	app := fiber.New(fiber.Config{
		AppName:               "svc",
		BodyLimit:             o.BodyLimit,
		DisableStartupMessage: true,
		ErrorHandler:          versioned(o.InterfaceVersion, ErrorHandler(o.Log)),
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           120 * time.Second,
	})
	app.Use(func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderCacheControl, "no-store")
		if o.InterfaceVersion != "" {
			c.Set(InterfaceVersionHeader, o.InterfaceVersion)
		}
		return c.Next()
	})
	app.Use(recover.New(recover.Config{EnableStackTrace: true, StackTraceHandler: func(c *fiber.Ctx, e any) {
		o.Log.ErrorContext(c.UserContext(), "panic in handler", "panic", e, "path", c.Path(), "request_id", c.Locals(requestid.ConfigDefault.ContextKey))
	}}))
	app.Use(requestid.New(requestid.Config{Header: RequestIDHeader}))
	if o.Tracer != nil {
		// Outside the access log, so that its line carries the span's ids.
		app.Use(otelfiber.Middleware(otelfiber.WithTracerProvider(o.Tracer), otelfiber.WithMeterProvider(tracing.MeterProvider),
			otelfiber.WithPropagators(tracing.Propagator), otelfiber.WithCollectClientIP(false),
			otelfiber.WithSpanNameFormatter(func(c *fiber.Ctx) string { return c.Method() + " " + routeOf(c) }),
			otelfiber.WithCustomAttributes(func(c *fiber.Ctx) []attribute.KeyValue {
				id, _ := c.Locals(requestid.ConfigDefault.ContextKey).(string)
				return []attribute.KeyValue{attribute.String("http.request_id", id)}
			})))
	}
	app.Use(accessLog(o.Log, o.Observe))
	return app
}

// NotFound registers the catch-all that answers unknown routes with 404
// {detail}. Call it after every route is registered.
//
// A path that a route serves with other methods is 405 with Allow naming
// them (HEAD with GET), as HTTP expects.
func NotFound(app *fiber.App) {
	app.Use(func(c *fiber.Ctx) error {
		c.Locals(unmatchedKey{}, true)
		if allow := allowed(app, c.Path()); len(allow) > 0 {
			c.Set(fiber.HeaderAllow, strings.Join(allow, ", "))
			return fault.New(fault.MethodNotAllowed, fmt.Sprintf("%s is not allowed on %s; allowed: %s", c.Method(), c.Path(), strings.Join(allow, ", ")))
		}
		return fault.New(fault.NotFound, "not found")
	})
}

// allowed lists the methods the app's routes serve path with, sorted.
func allowed(app *fiber.App, path string) []string {
	seen := map[string]bool{}
	for _, r := range app.GetRoutes(true) {
		if !seen[r.Method] && matches(r.Path, path) {
			seen[r.Method] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// matches reports whether a fiber route pattern (segments, ":param",
// "*") matches path.
func matches(pattern, path string) bool {
	// Fiber routes case-insensitively (and ignores a trailing slash).
	ps, xs := strings.Split(strings.Trim(strings.ToLower(pattern), "/"), "/"), strings.Split(strings.Trim(strings.ToLower(path), "/"), "/")
	for i, p := range ps {
		if p == "*" || strings.HasPrefix(p, "*") {
			return true
		}
		if i >= len(xs) {
			return false
		}
		if strings.HasPrefix(p, ":") {
			if xs[i] == "" {
				return false
			}
			continue
		}
		if p != xs[i] {
			return false
		}
	}
	return len(ps) == len(xs)
}

func accessLog(log *slog.Logger, observe func(method, route string, status int, took time.Duration)) fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		if err != nil { // let the error handler write the status before we log it
			if herr := c.App().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
		}
		took := time.Since(start)
		// The path, never the query string: keys must not reach a log even
		// when a client puts them there.
		log.InfoContext(c.UserContext(), "http",
			"method", c.Method(), "path", c.Path(), "route", c.Route().Path,
			"status", c.Response().StatusCode(), "duration_ms", took.Milliseconds(),
			"request_id", c.Locals(requestid.ConfigDefault.ContextKey))
		if observe != nil {
			// Copies: fiber reuses the buffers behind c's strings.
			observe(strings.Clone(c.Method()), strings.Clone(routeOf(c)), c.Response().StatusCode(), took)
		}
		return nil
	}
}

// unmatchedKey marks, in a request's locals, that NotFound answered it.
type unmatchedKey struct{}

// routeOf is the template of the route that answered c: the catch-all of
// NotFound is UnmatchedRoute, and a group's key check, which answers 401
// and 403 for every path under its prefix, gives the prefix ("/v1",
// "/v1/admin").
func routeOf(c *fiber.Ctx) string {
	if c.Locals(unmatchedKey{}) != nil {
		return UnmatchedRoute
	}
	return c.Route().Path
}

var statusOf = map[fault.Kind]int{
	fault.Internal:          fiber.StatusInternalServerError,
	fault.BadRequest:        fiber.StatusBadRequest,
	fault.Unauthenticated:   fiber.StatusUnauthorized,
	fault.InsufficientFunds: fiber.StatusPaymentRequired,
	fault.Forbidden:         fiber.StatusForbidden,
	fault.NotFound:          fiber.StatusNotFound,
	fault.Conflict:          fiber.StatusConflict,
	fault.Invalid:           fiber.StatusUnprocessableEntity,
	fault.UpstreamRefused:   fiber.StatusBadGateway,
	fault.Unavailable:       fiber.StatusServiceUnavailable,
	fault.MethodNotAllowed:  fiber.StatusMethodNotAllowed,
}

// Status returns the HTTP status for err.
func Status(err error) int {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return statusOf[fault.KindOf(err)]
}

// versioned is h that also sets InterfaceVersionHeader to v (when set): an
// error fiber raises before any middleware ran (a body too large) gets it
// too.
func versioned(v string, h fiber.ErrorHandler) fiber.ErrorHandler {
	if v == "" {
		return h
	}
	return func(c *fiber.Ctx, err error) error {
		c.Set(InterfaceVersionHeader, v)
		return h(c, err)
	}
}

// ErrorHandler maps any handler error to the SPEC's error body. It is the
// only place that does so.
func ErrorHandler(log *slog.Logger) fiber.ErrorHandler {
	return func(c *fiber.Ctx, err error) error {
		c.Set(fiber.HeaderCacheControl, "no-store")
		var fe *fiber.Error
		if errors.As(err, &fe) { // fiber's own: body too large, bad method...
			msg := fe.Message
			if fe.Code == fiber.StatusNotFound {
				msg = "not found"
			}
			return c.Status(fe.Code).JSON(fiber.Map{"detail": msg})
		}
		var e *fault.Error
		if (!errors.As(err, &e) || e.Kind == fault.Internal) && db.IsUnavailable(err) {
			// The database went away under the request (a restart, a
			// failover) or refuses work (disk full, read only, too many
			// connections): a dependency, retryable with the same key.
			// A restart takes seconds: Retry-After says to come back soon.
			msg := "the database is unreachable or the connection was lost; retry with the same Idempotency-Key"
			if !db.IsConnectionLoss(err) {
				msg = "the database refuses the change for now (full, read-only or out of connections); retry with the same Idempotency-Key"
				db.NoteRefusal(time.Now()) // /readyz shows it
			}
			e = fault.Wrap(fault.Unavailable, msg, err).WithRetryAfter(time.Second)
		}
		if e == nil || e.Kind == fault.Internal {
			log.ErrorContext(c.UserContext(), "request failed", "error", err, "method", c.Method(), "path", c.Path(),
				"request_id", c.Locals(requestid.ConfigDefault.ContextKey))
			return c.Status(fiber.StatusInternalServerError).JSON(fiber.Map{"detail": "internal error"})
		}
		status := statusOf[e.Kind]
		if e.RetryAfter > 0 {
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
		}
		if status >= 500 {
			log.WarnContext(c.UserContext(), "request failed", "status", status, "error", err, "path", c.Path(),
				"request_id", c.Locals(requestid.ConfigDefault.ContextKey))
		}
		switch {
		case len(e.Fields) > 0:
			return c.Status(status).JSON(fiber.Map{"detail": e.Fields})
		case e.Code != "":
			return c.Status(status).JSON(fiber.Map{"detail": fiber.Map{"code": e.Code, "message": e.Message}})
		default:
			return c.Status(status).JSON(fiber.Map{"detail": e.Message})
		}
	}
}
