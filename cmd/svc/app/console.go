package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"svc/modules/console"
)

// Console returns the operators' web console (modules/console), over the
// same operator service and database as the API.
func (a *App) Console() (*console.Server, error) {
	return console.New(console.Options{DB: a.DB.Bun, Operators: a.Operators, Health: a.Health, Alerts: a.Alerts,
		Reconcile: a.Reconcile, Withdrawals: a.Withdrawals, Deposits: a.Deposits, Events: a.Events, Endpoints: a.Endpoints, Keys: a.Keys,
		Assets: a.Assets, Liabilities: a.Liabilities, IdleTimeout: a.Cfg.Console.IdleTimeout,
		Secure: a.Cfg.ConsoleSecureCookies(), HSTS: a.Cfg.Console.TLS(), Now: a.Clock.Now, Log: a.Log})
}

// ServeConsole starts the console's listener on CONSOLE_ADDR (loopback by
// default), HTTPS with CONSOLE_TLS_CERT and CONSOLE_TLS_KEY, until stop.
// It returns the console's URL (its host the WebAuthn RP id when the
// address is a loopback one, since a passkey answers only there) and stop.
func (a *App) ServeConsole() (url string, stop func(), err error) {
	c, err := a.Console()
	if err != nil {
		return "", nil, err
	}
	cc := a.Cfg.Console
	var cert tls.Certificate
	if cc.TLS() {
		if cert, err = tls.LoadX509KeyPair(cc.TLSCert, cc.TLSKey); err != nil {
			return "", nil, fmt.Errorf("CONSOLE_TLS_CERT/CONSOLE_TLS_KEY: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cc.Addr)
	if err != nil {
		return "", nil, fmt.Errorf("CONSOLE_ADDR %s: %w", cc.Addr, err)
	}
	scheme := "http"
	if cc.TLS() {
		scheme = "https"
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.Log.Error("console listener stopped", "error", err)
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return scheme + "://" + net.JoinHostPort(a.Cfg.Operators.WebAuthnRPID, port) + "/", func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
