package svcsdk

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Retrying is an HTTP doer that sends a request again, the same bytes with
// the same Idempotency-Key, after a network error, a 409 with Retry-After
// (the first attempt is still in flight), a 500, a 503 or a 504, waiting what
// Retry-After says or else an exponential backoff. The service replays the
// first attempt's answer to a repeated key, so a retried creation creates
// one deposit or withdrawal. Only requests that carry an Idempotency-Key,
// and GET and HEAD, are retried.
//
//	c, err := svcsdk.New(url, key, svcsdk.WithHTTPClient(&svcsdk.Retrying{}))
//	res, err := c.CreateDepositWithResponse(ctx, &svcsdk.CreateDepositParams{IdempotencyKey: svcsdk.NewIdempotencyKey()}, body)
type Retrying struct {
	Doer        HttpRequestDoer // default http.DefaultClient
	MaxAttempts int             // attempts in all, the first included; default 5
	BaseDelay   time.Duration   // the first wait when the answer names none, doubled each retry; default 500ms
	MaxDelay    time.Duration   // the longest wait, Retry-After included; default 30s
}

// Do sends req, and again as Retrying says. The last answer (or error) is
// returned once the attempts are spent; a cancelled context stops the waits.
func (r *Retrying) Do(req *http.Request) (*http.Response, error) {
	doer := r.Doer
	if doer == nil {
		doer = http.DefaultClient
	}
	attempts := r.MaxAttempts
	if attempts <= 0 {
		attempts = 5
	}
	base, ceiling := r.BaseDelay, r.MaxDelay
	if base <= 0 {
		base = 500 * time.Millisecond
	}
	if ceiling <= 0 {
		ceiling = 30 * time.Second
	}
	retryable := req.Method == http.MethodGet || req.Method == http.MethodHead || req.Header.Get("Idempotency-Key") != ""
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		retryable = false // the body cannot be sent twice
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req.Body = body
		}
		resp, err := doer.Do(req)
		if !retryable || attempt >= attempts || req.Context().Err() != nil {
			return resp, err
		}
		wait := base << (attempt - 1)
		switch {
		case err != nil:
		case Retryable(resp):
			if d, ok := RetryAfter(resp); ok {
				wait = d
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		default:
			return resp, nil
		}
		t := time.NewTimer(min(wait, ceiling))
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, errors.Join(req.Context().Err(), err)
		case <-t.C:
		}
	}
}

// Retryable says whether an answer asks for a retry with the same
// Idempotency-Key: 409 with Retry-After (in flight), 500, 503 and 504.
func Retryable(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusConflict:
		return resp.Header.Get("Retry-After") != ""
	case http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RetryAfter is the wait an answer's Retry-After asks for, in seconds or as
// an HTTP date.
func RetryAfter(resp *http.Response) (time.Duration, bool) {
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}
