package btcpay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUnreachable matches every *UnreachableError: the processor could not
// be reached or its answer does not say whether the call took effect. Retry
// with the same correlation id.
var ErrUnreachable = errors.New("payment processor unreachable or answer ambiguous")

// ErrRefused matches every *RefusedError: the processor refused the call
// definitively and nothing was created.
var ErrRefused = errors.New("payment processor refused the request")

// ErrNotFound matches a *RefusedError with status 404 (an unknown invoice
// or payout, for example).
var ErrNotFound = errors.New("payment processor: not found")

// UnreachableError is an ambiguous failure.
type UnreachableError struct {
	Op      string
	Status  int    // 0 when no HTTP response arrived
	Code    string // BTCPay's error code, when the body carried one
	Message string
	Err     error // the transport or decoding error, if any
}

func (e *UnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "btcpay %s: unreachable", e.Op)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Code != "" || e.Message != "" {
		fmt.Fprintf(&b, ": %s", joinNonEmpty(e.Code, e.Message))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnreachable) true.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// FieldError is one entry of BTCPay's 422 validation body.
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// RefusedError is a definitive refusal.
type RefusedError struct {
	Op      string
	Status  int
	Code    string       // e.g. "duplicate-destination", "invoice-not-found"
	Message string       // BTCPay's human-readable message
	Fields  []FieldError // the validation errors of a 422
}

func (e *RefusedError) Error() string {
	msg := joinNonEmpty(e.Code, e.Message)
	for _, f := range e.Fields {
		msg = joinNonEmpty(msg, joinNonEmpty(f.Path, f.Message))
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("btcpay %s: refused: HTTP %d: %s", e.Op, e.Status, msg)
}

// Is makes errors.Is(err, ErrRefused) true, and ErrNotFound for a 404.
func (e *RefusedError) Is(target error) bool {
	return target == ErrRefused || (target == ErrNotFound && e.Status == http.StatusNotFound)
}

// Reason is the refusal in words for an integrator: BTCPay's message, or
// the validation messages, or the status text.
func (e *RefusedError) Reason() string {
	if e.Message != "" {
		return e.Message
	}
	var parts []string
	for _, f := range e.Fields {
		parts = append(parts, joinNonEmpty(f.Path, f.Message))
	}
	if len(parts) > 0 {
		return strings.Join(parts, "; ")
	}
	return http.StatusText(e.Status)
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	default:
		return a + ": " + b
	}
}

// classify turns a non-2xx response into the caller's kind of error.
func classify(op string, status int, body []byte) error {
	if status >= 200 && status < 300 {
		return nil
	}
	code, msg, fields := problem(body)
	if status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests {
		return &UnreachableError{Op: op, Status: status, Code: code, Message: msg}
	}
	return &RefusedError{Op: op, Status: status, Code: code, Message: msg, Fields: fields}
}

// problem reads BTCPay's error bodies: {"code","message"} (ProblemDetails)
// or [{"path","message"}] (a 422). Anything else yields nothing, and the
// message is truncated so a proxy's HTML page does not flood a log line.
func problem(body []byte) (code, msg string, fields []FieldError) {
	var pd struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &pd); err == nil {
		return pd.Code, truncate(pd.Message), nil
	}
	if err := json.Unmarshal(body, &fields); err == nil {
		for i := range fields {
			fields[i].Message = truncate(fields[i].Message)
		}
		return "", "", fields
	}
	return "", "", nil
}

func truncate(s string) string {
	const limit = 300
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
