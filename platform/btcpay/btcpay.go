// Package btcpay is the service's client of the payment processor, BTCPay
// Server's Greenfield API 2.x: invoices (deposits), store payouts
// (withdrawals), the store's payment methods (asset discovery), the on-chain
// wallet and the Lightning node (fee rates, scans, custody balances), and
// the signature and shape of the webhooks BTCPay sends.
//
// Every path is store-scoped (/api/v1/stores/{storeId}/...), which every
// Greenfield version accepts; every call carries `Authorization: token
// <key>` and has a time limit. Amounts are decimal strings parsed exactly
// (Amount), times are unix seconds (UnixTime), unknown fields are ignored.
//
// Failures are classified for the callers, because what they may do next
// depends on it:
//
//   - ErrUnreachable: the processor could not be reached, or answered in a
//     way that does not say whether the call took effect (network error,
//     timeout, 5xx, 408, 429, or a success body that does not parse). The
//     caller may retry with the same correlation id (metadata.orderId of an
//     invoice, the withdrawal id in a payout's metadata) after first asking
//     whether the earlier attempt landed.
//   - *RefusedError: a definitive refusal (any other 4xx) carrying BTCPay's
//     code and message. Nothing was created.
package btcpay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"time"

	"svc/platform/fault"
)

// maxResponseBytes bounds what the client reads from one response.
const maxResponseBytes = 8 << 20

// Options configures a Client.
type Options struct {
	URL     string        // base URL of the BTCPay Server, e.g. https://btcpay.example.com
	APIKey  string        // Greenfield API key
	StoreID string        // the store that holds our invoices and payouts
	Timeout time.Duration // time limit of one call (default 15s)
	// HTTPClient, when set, sends the requests (tests wrap its transport to
	// record traffic). Its own Timeout is left as given.
	HTTPClient *http.Client
	// Transport, when set, is the transport of the client New makes
	// (tracing wraps NewTransport's); ignored with HTTPClient. Unset:
	// NewTransport().
	Transport http.RoundTripper
	// Observe, when set, is told of every call (metrics): its fixed
	// operation name ("create invoice"), its outcome (fault.CallOutcome) and how long
	// it took.
	Observe func(op, outcome string, took time.Duration)
}

// Client calls one BTCPay store. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	key     string
	store   string
	timeout time.Duration
	hc      *http.Client
	observe func(op, outcome string, took time.Duration)
}

// New returns a client for o.
func New(o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(o.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("btcpay: base URL must be an http:// or https:// URL")
	}
	if o.APIKey == "" || o.StoreID == "" {
		return nil, errors.New("btcpay: API key and store id are required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Second
	}
	hc := o.HTTPClient
	if hc == nil {
		// The per-call context carries the time limit; this one is a backstop
		// for a body that trickles in after the headers.
		tr := o.Transport
		if tr == nil {
			tr = NewTransport()
		}
		hc = &http.Client{Timeout: o.Timeout + 5*time.Second, Transport: tr}
	}
	return &Client{base: u, key: o.APIKey, store: o.StoreID, timeout: o.Timeout, hc: hc, observe: o.Observe}, nil
}

// idleConns is how many idle connections to the processor NewTransport
// keeps: as many as a worker runs jobs at once by default
// (WORKER_CONCURRENCY, 20), each of which may be calling the processor,
// with room for the api's deposit creations.
const idleConns = 32

// NewTransport returns http.DefaultTransport's settings keeping up to
// idleConns idle connections to the processor, where the default keeps
// two: every call beyond two at once dialled a connection, and closed it
// after. In the deposit case of BenchmarkCPUPerOperation the dialling was
// 3% of the worker's CPU profile, beside the kernel's work for each
// connection opened and closed (docs/performance.md).
func NewTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = idleConns
	return tr
}

// StoreID returns the store the client works on.
func (c *Client) StoreID() string { return c.store }

// storePath returns /api/v1/stores/{storeId} followed by the escaped parts.
func (c *Client) storePath(parts ...string) string {
	p := "/api/v1/stores/" + url.PathEscape(c.store)
	for _, s := range parts {
		p += "/" + url.PathEscape(s)
	}
	return p
}

// metadataWith is a copy of meta with key set to id: the metadata of an
// object created with the id it is found by again.
func metadataWith(meta map[string]any, key, id string) map[string]any {
	out := make(map[string]any, len(meta)+1)
	maps.Copy(out, meta)
	out[key] = id
	return out
}

// callFor is call for a result of type T, which it returns.
func callFor[T any](ctx context.Context, c *Client, op, method, path string, query url.Values, in any) (T, error) {
	var out T
	err := c.call(ctx, op, method, path, query, in, &out)
	return out, err
}

// call sends one request and decodes a 2xx JSON body into out (when out is
// not nil). op names the call in errors.
func (c *Client) call(ctx context.Context, op, method, path string, query url.Values, in, out any) error {
	return c.do(ctx, op, method, path, query, in, func(raw io.Reader, status int) error {
		if out == nil {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(raw, maxResponseBytes))
		if err != nil {
			return &UnreachableError{Op: op, Status: status, Err: fmt.Errorf("read response: %w", scrub(err))}
		}
		if err := json.Unmarshal(b, out); err != nil {
			// A success whose body we cannot read: the call may have taken
			// effect, so this is ambiguous, not a refusal.
			return &UnreachableError{Op: op, Status: status, Err: fmt.Errorf("decode response: %w", err)}
		}
		return nil
	})
}

// each calls a GET that answers a JSON array and hands its elements to fn
// one at a time, as they are read: a list of any length is read in
// constant memory, with no cap on the body (the call's timeout bounds
// it). fn returning false stops reading.
func each[T any](ctx context.Context, c *Client, op, path string, query url.Values, fn func(T) bool) error {
	return c.do(ctx, op, "GET", path, query, nil, func(body io.Reader, status int) error {
		bad := func(err error) error {
			return &UnreachableError{Op: op, Status: status, Err: fmt.Errorf("decode response: %w", scrub(err))}
		}
		dec := json.NewDecoder(body)
		if tok, err := dec.Token(); err != nil {
			return bad(err)
		} else if d, ok := tok.(json.Delim); !ok || d != '[' {
			return bad(fmt.Errorf("want a JSON array, got %v", tok))
		}
		for dec.More() {
			var v T
			if err := dec.Decode(&v); err != nil {
				return bad(err)
			}
			if !fn(v) {
				return nil
			}
		}
		if _, err := dec.Token(); err != nil {
			return bad(err)
		}
		return nil
	})
}

// eachContaining is each for the elements whose JSON contains needle: the
// others are only scanned, never decoded. A store's payout list grows
// without end and has no filter (BTCPay neither pages nor filters it), so
// a lookup by a transaction id or a withdrawal id would otherwise decode
// every payout the store ever made; scanning the bytes costs a fraction of
// decoding them. The ids looked up this way are hex digits, letters and
// hyphens, which JSON writes as they are.
func eachContaining[T any](ctx context.Context, c *Client, op, path string, query url.Values, needle string, fn func(T) bool) error {
	n := []byte(needle)
	var err error
	walk := each[json.RawMessage](ctx, c, op, path, query, func(raw json.RawMessage) bool {
		if !bytes.Contains(raw, n) {
			return true
		}
		var v T
		if err = json.Unmarshal(raw, &v); err != nil {
			err = &UnreachableError{Op: op, Status: http.StatusOK, Err: fmt.Errorf("decode response: %w", scrub(err))}
			return false
		}
		return fn(v)
	})
	if walk != nil {
		return walk
	}
	return err
}

// do sends one request and hands a success's body to read (an error
// answer is classified from its first maxResponseBytes).
func (c *Client) do(ctx context.Context, op, method, path string, query url.Values, in any, read func(body io.Reader, status int) error) error {
	if c.observe == nil {
		return c.send(ctx, op, method, path, query, in, read)
	}
	start := time.Now()
	err := c.send(ctx, op, method, path, query, in, read)
	c.observe(op, fault.CallOutcome(err, ErrNotFound, ErrRefused, ErrUnreachable), time.Since(start))
	return err
}

func (c *Client) send(ctx context.Context, op, method, path string, query url.Values, in any, read func(body io.Reader, status int) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("btcpay %s: encode request: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	u := *c.base
	u.Path = c.base.Path + path
	u.RawPath = ""
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("btcpay %s: build request: %w", op, err)
	}
	req.Header.Set("Authorization", "token "+c.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The request may or may not have reached the server.
		return &UnreachableError{Op: op, Err: scrub(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		if err != nil {
			return &UnreachableError{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("read response: %w", scrub(err))}
		}
		if err := classify(op, resp.StatusCode, raw); err != nil {
			return err
		}
	}
	return read(resp.Body, resp.StatusCode)
}

// scrub removes the request URL from a transport error: it is long, and
// the caller already knows which call failed.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
