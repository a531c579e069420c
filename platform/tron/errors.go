package tron

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUnreachable matches every *UnreachableError: the node could not be
// reached or gave no usable answer. The call is a read: try again later.
var ErrUnreachable = errors.New("TRON node unreachable or answer unusable")

// ErrRefused matches every *RefusedError: the node refused the request.
var ErrRefused = errors.New("TRON node refused the request")

// ErrNotFound means the node does not know the transaction (not broadcast,
// dropped, or not yet propagated to that node).
var ErrNotFound = errors.New("transaction not found on the TRON node")

// UnreachableError is a failure that says nothing about the question asked.
type UnreachableError struct {
	Op      string
	Status  int // HTTP status, 0 when there was no response
	Message string
	Err     error
}

func (e *UnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tron %s: node unreachable", e.Op)
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnreachable) true.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// RefusedError is a definitive refusal.
type RefusedError struct {
	Op      string
	Status  int
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("tron %s: refused (HTTP %d): %s", e.Op, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// classify turns a response into the caller's kind of error, or nil for a
// usable 2xx. java-tron answers a bad request with 200 and {"Error": "..."}.
func classify(op string, status int, body []byte) error {
	msg, nodeErr := errorMessage(body)
	switch {
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return &UnreachableError{Op: op, Status: status, Message: msg}
	case status >= 400 && rateLimited(msg):
		// TronGrid has answered an exhausted key's quota with 403.
		return &UnreachableError{Op: op, Status: status, Message: msg}
	case status >= 300:
		if msg == "" {
			msg = http.StatusText(status)
		}
		return &RefusedError{Op: op, Status: status, Message: msg}
	case nodeErr:
		return &RefusedError{Op: op, Status: status, Message: msg}
	}
	return nil
}

func rateLimited(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "frequency limit") || strings.Contains(m, "rate limit") || strings.Contains(m, "too many requests")
}

// errorMessage reads the error text of a java-tron or TronGrid body:
// {"Error": "..."} (java-tron, sent with status 200), {"error": "..."} or
// {"message": "..."}, truncated so a proxy's HTML page does not flood a log
// line. nodeErr reports java-tron's form, the only one that makes a 200 a
// refusal.
func errorMessage(body []byte) (msg string, nodeErr bool) {
	var e struct {
		NodeError string `json:"Error"`
		Error     string `json:"error"`
		Message   string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "", false
	}
	switch {
	case e.NodeError != "":
		msg, nodeErr = e.NodeError, true
	case e.Error != "":
		msg = e.Error
	default:
		msg = e.Message
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg, nodeErr
}
