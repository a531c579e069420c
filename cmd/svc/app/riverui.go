package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

	"svc/modules/apikey"
	"svc/platform/queue"
)

// riverUIRealm names the River UI's sign-in prompt.
const riverUIRealm = "svc River UI"

// RiverUI returns River's web UI (riverqueue.com/riverui: River's own
// dashboard of queues and jobs, with retry, cancel and delete), behind HTTP
// basic authentication with an admin API key (apikey.Store.BasicAuth); a
// readwrite key is refused. The UI's River client only reads and changes
// job rows: it works no job and is never started. The UI's background
// services run until ctx ends.
//
// docs/operations.md, "River UI", says what an operator may do there.
func (a *App) RiverUI(ctx context.Context) (http.Handler, error) {
	log := queue.Quiet(a.Log)
	client, err := river.NewClient(riverpgxv5.New(a.DB.Pool), &river.Config{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("river UI: client: %w", err)
	}
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    log,
		// Job arguments are ids, never secrets (jobs/), but the list is
		// easier to read without them; a job's page shows them.
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return nil, fmt.Errorf("river UI: %w", err)
	}
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("river UI: start: %w", err)
	}
	return a.Keys.BasicAuth(apikey.ScopeAdmin, riverUIRealm, sameOrigin(a.logUIChanges(h))), nil
}

// logUIChanges writes one log line per request that changes something
// (retry, cancel, delete, a queue paused or resumed), naming the admin key
// that made it and what it asked (the job ids): the UI's actions are
// River's, outside the audit trail.
func (a *App) logUIChanges(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			k, _ := apikey.KeyFromContext(r.Context())
			body, err := io.ReadAll(io.LimitReader(r.Body, maxUIChangeBody+1))
			if err != nil || len(body) > maxUIChangeBody {
				http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			a.Log.Info("river UI: operator action", "method", r.Method, "path", r.URL.Path, "request", string(body),
				"key_id", k.ID, "key_label", k.Label)
		}
		next.ServeHTTP(w, r)
	})
}

// maxUIChangeBody bounds a change's body: at most 1,000 job ids.
const maxUIChangeBody = 64 << 10

// sameOrigin refuses a request that changes something when it comes from
// another site's page: a browser signed in to the UI sends the credentials
// with such a request too (it always names its Origin on one).
func sameOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if o := r.Header.Get("Origin"); o != "" {
				u, err := url.Parse(o)
				if err != nil || u.Host != r.Host {
					http.Error(w, "cross-site request refused", http.StatusForbidden)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ServeAdminUI starts the River UI's listener on ADMIN_UI_ADDR (loopback
// by default) until ctx ends. It returns the address it listens on and
// stop, which closes it.
func (a *App) ServeAdminUI(ctx context.Context) (addr string, stop func(), err error) {
	h, err := a.RiverUI(ctx)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", a.Cfg.AdminUI.Addr)
	if err != nil {
		return "", nil, fmt.Errorf("ADMIN_UI_ADDR %s: %w", a.Cfg.AdminUI.Addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.Log.Error("river UI listener stopped", "error", err)
		}
	}()
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
