// Package health answers /healthz (is this process and its database alive)
// and /readyz (can the service do its work: database, worker heartbeat, and
// the components other areas register, such as the processor).
//
// An Advisory component (the read replica) is shown but does not count
// towards readiness.
//
// /readyz needs no key, so it must not be a way to make the service call
// its upstreams (with their API keys) at the caller's pace, nor show their
// error text (host names, upstream messages) to anyone: each registered
// component's result is reused for CacheFor, and an Upstream component's
// failure is answered in general words and logged in full.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/logging"
)

// Check is one readiness component. It returns nil when ok, or an error
// whose text becomes the component's detail, unless Upstream is set: then
// the detail is general and the error is logged.
type Check struct {
	Name     string
	Run      func(ctx context.Context) error
	Upstream bool
	// Classify, for an Upstream component, may name the kind of failure in
	// words safe to show anyone (e.g. the HTTP status of a refusal); ""
	// keeps the general text.
	Classify func(error) string
	// Advisory components are shown, degraded or not, but never make the
	// service unready: the read replica, whose loss only sends the lists
	// to the primary.
	Advisory bool
}

// upstreamDetail is what an anonymous caller learns of a failing upstream.
const upstreamDetail = "unreachable or refusing the service's requests (details in the service's logs)"

// cached is the last result of one component; a zero at means none yet.
type cached struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// Component is one entry of the readiness body.
type Component struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	Detail *string `json:"detail"`
}

// Service answers the health routes.
type Service struct {
	DB         bun.IDB
	Version    string
	Now        func() time.Time
	StaleAfter time.Duration // worker heartbeat age that counts as degraded
	Checks     []Check       // extra components (processor, tron_node, ...)
	// CacheFor is how long a registered component's result is reused; 0
	// asks on every request.
	CacheFor time.Duration
	Log      *slog.Logger

	cacheMu sync.Mutex
	cache   map[string]*cached
}

// run returns ch's result, from the cache when it is fresh; concurrent
// callers of a stale component wait for one run.
func (s *Service) run(ctx context.Context, ch Check) error {
	if s.CacheFor <= 0 {
		return ch.Run(ctx)
	}
	s.cacheMu.Lock()
	if s.cache == nil {
		s.cache = map[string]*cached{}
	}
	c := s.cache[ch.Name]
	if c == nil {
		c = &cached{}
		s.cache[ch.Name] = c
	}
	s.cacheMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.at.IsZero() && now.Sub(c.at) < s.CacheFor {
		return c.err
	}
	c.err, c.at = ch.Run(ctx), now
	return c.err
}

// Beat records that worker id is alive.
func Beat(ctx context.Context, db bun.IDB, id string, at time.Time) error {
	_, err := db.NewRaw(`INSERT INTO worker_heartbeats (worker_id, beat_at) VALUES (?, ?)
		ON CONFLICT (worker_id) DO UPDATE SET beat_at = excluded.beat_at`, id, at.UTC()).Exec(ctx)
	return err
}

// Routes registers /healthz and /readyz.
func (s *Service) Routes(r fiber.Router) {
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
}

func (s *Service) healthz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := s.pingDB(ctx); err != nil {
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "unhealthy", "database": "unreachable", "version": s.Version})
	}
	return c.JSON(fiber.Map{"status": "ok", "database": "ok", "version": s.Version})
}

// refusalWindow is how long a refused write keeps the database component
// degraded: readiness follows what requests saw, without writing on every
// probe.
const refusalWindow = 10 * time.Second

// writable is readiness's database check: it answers, it takes writes (not
// a standby in recovery, not read-only by default), and no request of this
// process saw it refuse work (disk full, too many connections) in the last
// refusalWindow.
func (s *Service) writable(ctx context.Context) error {
	var readOnly bool
	if err := s.DB.NewRaw("SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'").Scan(ctx, &readOnly); err != nil {
		return err
	}
	if readOnly {
		return errors.New("the database is read-only (a standby, or default_transaction_read_only): writes are refused")
	}
	if at := db.LastRefusal(); !at.IsZero() && time.Since(at) < refusalWindow {
		return fmt.Errorf("the database refused writes %s ago (disk full, read-only or out of connections)", time.Since(at).Round(time.Second))
	}
	return nil
}

func (s *Service) pingDB(ctx context.Context) error {
	var one int
	return s.DB.NewRaw("SELECT 1").Scan(ctx, &one)
}

func (s *Service) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 5*time.Second)
	defer cancel()
	ready, comps := s.Readiness(ctx)
	if !ready {
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "degraded", "components": comps})
	}
	return c.JSON(fiber.Map{"status": "ready", "components": comps})
}

// Readiness is what /readyz answers: whether the service is ready, and
// each component with its status and detail (an Upstream component's
// failure in general words, logged in full).
func (s *Service) Readiness(ctx context.Context) (bool, []Component) {
	checks := append([]Check{{Name: "database", Run: s.writable}, {Name: "worker", Run: nil}}, s.Checks...)
	comps := make([]Component, len(checks))
	ready := true
	for i, ch := range checks {
		comps[i] = Component{Name: ch.Name, Status: "ok"}
		var err error
		if ch.Name == "worker" {
			var detail string
			detail, err = s.worker(ctx)
			comps[i].Detail = &detail // the SPEC shows the worker's detail even when ok
		} else if ch.Run != nil {
			err = s.run(ctx, ch)
		}
		if err != nil {
			ready = ready && ch.Advisory
			msg := err.Error()
			if ch.Upstream {
				s.logger().WarnContext(ctx, "readiness: component degraded", "component", ch.Name, "error", err)
				msg = upstreamDetail
				if ch.Classify != nil {
					if kind := ch.Classify(err); kind != "" {
						msg = kind + " (details in the service's logs)"
					}
				}
			}
			comps[i].Status, comps[i].Detail = "degraded", &msg
		}
	}
	return ready, comps
}

func (s *Service) logger() *slog.Logger { return logging.Or(s.Log) }

type staleError string

func (e staleError) Error() string { return string(e) }

// LastBeat returns the most recent worker heartbeat; nil before the first.
func LastBeat(ctx context.Context, idb bun.IDB) (*time.Time, error) {
	var last *time.Time
	if err := idb.NewRaw("SELECT max(beat_at) FROM worker_heartbeats").Scan(ctx, &last); err != nil {
		return nil, fmt.Errorf("worker heartbeat: %w", err)
	}
	return last, nil
}

func (s *Service) worker(ctx context.Context) (string, error) {
	last, err := LastBeat(ctx, s.DB)
	if err != nil {
		return "", staleError("database unreachable")
	}
	if last == nil {
		return "", staleError("no worker heartbeat yet")
	}
	age := s.Now().Sub(*last).Round(time.Second)
	if age > s.StaleAfter {
		return "", staleError("last heartbeat " + age.String() + " ago (stale after " + s.StaleAfter.String() + ")")
	}
	return "last heartbeat " + age.String() + " ago", nil
}
