// Package tron is the service's client of a TRON node's HTTP API (TronGrid,
// or any java-tron full node): a transaction's receipt and its TRC-20
// Transfer events, the TRX and USDT balances of an address, and the latest
// block for readiness and confirmations. It verifies USDT transfers that
// operators send off-service and reconciles the USDT pool independently of
// the payment processor. It only reads; it never signs or sends.
//
// Calls go to the java-tron /wallet and /walletsolidity endpoints, which
// TronGrid serves as well as a plain node does; the API key, when set, goes
// in the TRON-PRO-API-KEY header. Every call has a time limit.
//
// Failures are classified for the callers:
//
//   - ErrUnreachable (*UnreachableError): the node could not be reached or
//     gave no usable answer (network error, timeout, 5xx, 408, 429, a rate
//     limit, a success body that does not parse). Try again later.
//   - ErrRefused (*RefusedError): the node refused the request (another 4xx,
//     or java-tron's {"Error": ...} body). Retrying the same call will not help.
//   - ErrNotFound: the node does not know the transaction.
package tron

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

	"svc/platform/chain"
	"svc/platform/config"
	"svc/platform/fault"
)

// maxResponseBytes bounds what the client reads from one response.
const maxResponseBytes = 4 << 20

// Client reads from one TRON node. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	key     string
	usdt    chain.TronAddress
	timeout time.Duration
	hc      *http.Client
	rt      http.RoundTripper
	observe func(op, outcome string, took time.Duration)
}

// Option changes how a Client is built.
type Option func(*Client)

// WithHTTPClient sends the requests through hc (tests record traffic).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTransport sets the transport of the client New makes (tracing wraps
// the default one); ignored with WithHTTPClient.
func WithTransport(rt http.RoundTripper) Option { return func(c *Client) { c.rt = rt } }

// WithObserver tells fn of every call (metrics): its fixed operation name
// (the node's method, "getaccount"), its outcome (fault.CallOutcome) and how long it
// took.
func WithObserver(fn func(op, outcome string, took time.Duration)) Option {
	return func(c *Client) { c.observe = fn }
}

// New returns a client for the node at cfg.URL that accepts cfg.USDTContract
// as the USDT token.
func New(cfg config.Tron, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("tron: TRONGRID_URL must be an http:// or https:// URL")
	}
	usdt, err := chain.ParseTronAddress(cfg.USDTContract)
	if err != nil {
		return nil, fmt.Errorf("tron: USDT_TRC20_CONTRACT: %w", err)
	}
	c := &Client{base: u, key: cfg.APIKey, usdt: usdt, timeout: cfg.Timeout}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		// The per-call context carries the time limit; this one is a
		// backstop for a body that trickles in after the headers.
		c.hc = &http.Client{Timeout: c.timeout + 5*time.Second, Transport: c.rt}
	}
	return c, nil
}

// USDTContract returns the token contract the client treats as USDT.
func (c *Client) USDTContract() chain.TronAddress { return c.usdt }

// post sends one JSON POST and decodes a 2xx JSON body into out.
func (c *Client) post(ctx context.Context, op, path string, in, out any) error {
	if c.observe == nil {
		return c.send(ctx, op, path, in, out)
	}
	start := time.Now()
	err := c.send(ctx, op, path, in, out)
	c.observe(op, fault.CallOutcome(err, ErrNotFound, ErrRefused, ErrUnreachable), time.Since(start))
	return err
}

func (c *Client) send(ctx context.Context, op, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("tron %s: encode request: %w", op, err)
	}
	u := *c.base
	u.Path = c.base.Path + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("tron %s: build request: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("TRON-PRO-API-KEY", c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &UnreachableError{Op: op, Err: scrub(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return &UnreachableError{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("read response: %w", scrub(err))}
	}
	if err := classify(op, resp.StatusCode, raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &UnreachableError{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("decode response: %w", err)}
	}
	return nil
}

// scrub removes the request URL from a transport error.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
