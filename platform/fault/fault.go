// Package fault classifies errors by what the caller can do about them, so
// that business code never speaks HTTP and the HTTP layer maps each kind to a
// status in exactly one place (platform/httpapi).
//
// A module declares its sentinels with a kind:
//
//	var ErrInsufficientFunds = fault.New(fault.InsufficientFunds, "insufficient available balance")
//
// and wraps them with context as usual (fmt.Errorf("hold: %w", err)); the
// kind survives wrapping.
package fault

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind is the class of an error.
type Kind int

// The kinds. Each maps to one SPEC status in httpapi.
const (
	Internal          Kind = iota // 500: a bug or an unexpected failure
	BadRequest                    // 400: missing Idempotency-Key, unparseable ingress body
	Unauthenticated               // 401
	InsufficientFunds             // 402
	Forbidden                     // 403
	NotFound                      // 404
	Conflict                      // 409: illegal transition, request in flight
	Invalid                       // 422: a business rule refused the request
	UpstreamRefused               // 502: the processor refused definitively
	Unavailable                   // 503: a dependency is unreachable or the asset unavailable
	MethodNotAllowed              // 405: a known path with another method
)

// Error is an error with a kind and a client-facing message.
type Error struct {
	Kind    Kind
	Message string
	// RetryAfter, when set, is sent as a Retry-After header (409, 503).
	RetryAfter time.Duration
	// Code, when set, makes the body {detail: {code, message}} (SPEC: the
	// pool-exhaustion 503 is the only error with a machine-readable code).
	Code string
	// Fields, when set, makes the body the 422 field-error list.
	Fields []FieldError
	cause  error
}

func (e *Error) Error() string {
	msg := e.Message
	// Field errors say what is wrong; the command line and logs show them
	// (the HTTP body lists them itself).
	for i, f := range e.Fields {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		msg += sep + f.where() + f.Msg
	}
	if e.cause != nil {
		return msg + ": " + e.cause.Error()
	}
	return msg
}

// where renders a field error's location as "body.note: ".
func (f FieldError) where() string {
	parts := make([]string, 0, len(f.Loc))
	for _, l := range f.Loc {
		parts = append(parts, fmt.Sprint(l))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ".") + ": "
}

func (e *Error) Unwrap() error { return e.cause }

// Is makes two *Error values with the same kind and message match, so a
// package-level sentinel can be tested with errors.Is after copying.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && t.Message == e.Message && t.Code == e.Code
}

// New returns a sentinel-style error of kind k.
func New(k Kind, msg string) *Error { return &Error{Kind: k, Message: msg} }

// Wrap gives cause a kind and a client-facing message; cause stays in the
// chain (and in logs) but is not shown to the client.
func Wrap(k Kind, msg string, cause error) *Error { return &Error{Kind: k, Message: msg, cause: cause} }

// WithRetryAfter returns a copy of e that asks the client to wait d.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// KindOf returns the kind of the first *Error in err's chain, or Internal.
func KindOf(err error) Kind {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Kind
	}
	return Internal
}

// FieldError is one entry of a 422 body that does not fit the request model.
type FieldError struct {
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Type  string         `json:"type"`
	Input any            `json:"input,omitempty"`
	Ctx   map[string]any `json:"ctx,omitempty"`
}

// Validation returns a 422 carrying field errors.
func Validation(fields ...FieldError) *Error {
	return &Error{Kind: Invalid, Message: "request does not fit the model", Fields: fields}
}

// MergeValidation joins the field errors of several checks into one 422,
// so a client learns of every bad parameter at once. A nil error is
// skipped; the first error that carries no field errors is returned as is.
func MergeValidation(errs ...error) error {
	var fields []FieldError
	for _, err := range errs {
		var fe *Error
		switch {
		case err == nil:
		case errors.As(err, &fe) && len(fe.Fields) > 0:
			fields = append(fields, fe.Fields...)
		default:
			return err
		}
	}
	if len(fields) == 0 {
		return nil
	}
	return Validation(fields...)
}

// The outcomes of a call to an outside service (the processor, a TRON
// node), as CallOutcome names them for metrics.
const (
	CallOK          = "ok"
	CallNotFound    = "not_found"   // the service does not know what was asked about
	CallRefused     = "refused"     // any other definitive refusal
	CallUnreachable = "unreachable" // down, timed out, 5xx, or an answer that cannot be read
	CallError       = "error"       // the request could not be built
)

// CallOutcome names what came of a call to an outside service from its
// error, given the client's own sentinels (checked in this order, so a
// not-found that is also a refusal is not_found).
func CallOutcome(err, notFound, refused, unreachable error) string {
	switch {
	case err == nil:
		return CallOK
	case errors.Is(err, notFound):
		return CallNotFound
	case errors.Is(err, refused):
		return CallRefused
	case errors.Is(err, unreachable):
		return CallUnreachable
	default:
		return CallError
	}
}
