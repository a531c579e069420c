package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"svc/platform/fault"
)

// Header names.
const (
	KeyHeader      = "Idempotency-Key"
	ReplayedHeader = "Idempotent-Replayed"
)

const localsKey = "idempotency"

// FromCtx returns the request's claimed record (nil outside the middleware).
func FromCtx(c *fiber.Ctx) *Record {
	r, _ := c.Locals(localsKey).(*Record)
	return r
}

// Middleware enforces the rules of the package doc on one route: it
// claims the key, then runs the route's handler.
func (s *Store) Middleware(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		key, err := headerKey(c)
		if err != nil {
			return err
		}
		ctx := c.UserContext()
		rec, stored, err := s.Begin(ctx, key, c.Method(), c.Path(), Hash(c.Method(), c.Path(), c.BodyRaw()))
		if err != nil {
			return s.refused(err)
		}
		if stored != nil {
			return s.replay(c, stored)
		}
		herr := s.run(c, rec, c.Next)
		return s.finish(c, rec, herr, log)
	}
}

// ClaimInHandler is Middleware for a route whose handler claims the key in
// its own first statement, together with the reads it starts with
// (Record.ClaimExpr, Record.Claimed), so that the claim is not a statement
// and a round trip of its own. The rules of the package doc hold as they
// are; only the order of work changes:
//
//   - a new key: the handler's first statement claims it, and the rest is
//     Middleware's;
//   - a key seen before: the claim finds it, the handler stops with
//     ErrNotClaimed before any effect, and the key takes Middleware's path
//     (a replay, 409 in flight, 422 for another request); when that path
//     claims it (a released or dead attempt's key), the handler runs again;
//   - a handler that refuses the request before its first statement (its
//     body does not parse) changed nothing: the key is then claimed as
//     Middleware would have, and the refusal stored, unless the key was
//     seen before, whose own answer (replay, 409, 422) wins as it would
//     have.
//
// The handler must claim before any effect, in a statement on the pool
// (idempotency_claim refuses to run inside a transaction that wrote).
func (s *Store) ClaimInHandler(log *slog.Logger, h fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		key, err := headerKey(c)
		if err != nil {
			return err
		}
		method, path := c.Method(), c.Path()
		hash := Hash(method, path, c.BodyRaw())
		rec := &Record{Key: key, stored: StoredKey(path, key), token: uuid.New(), store: s,
			pending: &pendingClaim{method: method, path: path, hash: hash}}
		herr := s.run(c, rec, func() error { return h(c) })
		if rec.pending == nil {
			return s.finish(c, rec, herr, log)
		}
		// Not claimed: nothing took effect. The ordinary path decides.
		r2, stored, err := s.Begin(c.UserContext(), key, method, path, hash)
		if err != nil {
			return s.refused(err)
		}
		if stored != nil {
			return s.replay(c, stored)
		}
		if errors.Is(herr, ErrNotClaimed) {
			herr = s.run(c, r2, func() error { return h(c) })
		}
		return s.finish(c, r2, herr, log)
	}
}

// headerKey reads and checks the request's Idempotency-Key.
func headerKey(c *fiber.Ctx) (string, error) {
	key := c.Get(KeyHeader)
	if key == "" {
		return "", ErrMissingKey
	}
	if len(key) > 255 || !printable(key) {
		return "", ErrBadKey
	}
	return string([]byte(key)), nil // copy: fiber reuses header buffers
}

// refused counts a key refused by Begin and returns the refusal.
func (s *Store) refused(err error) error {
	switch {
	case errors.Is(err, ErrMismatch):
		s.observe(OutcomeMismatch)
	case errors.Is(err, ErrInFlight):
		s.observe(OutcomeInFlight)
	}
	return err
}

// replay answers with a stored response.
func (s *Store) replay(c *fiber.Ctx, stored *Stored) error {
	s.observe(OutcomeReplayed)
	c.Set(ReplayedHeader, "true")
	if stored.ContentType != "" {
		c.Set(fiber.HeaderContentType, stored.ContentType)
	}
	return c.Status(stored.Status).Send(stored.Body)
}

// run runs the handler with rec as the request's record; a panic releases
// a claimed key before it goes on.
func (s *Store) run(c *fiber.Ctx, rec *Record, next func() error) error {
	c.Locals(localsKey, rec)
	defer func() {
		if p := recover(); p != nil {
			if rec.pending == nil {
				_ = rec.Release(context.WithoutCancel(c.UserContext()))
			}
			panic(p)
		}
	}()
	return next()
}

// finish writes the handler's answer and makes it the key's: a final
// response (2xx, 4xx) is stored, a 5xx releases the key for a retry.
func (s *Store) finish(c *fiber.Ctx, rec *Record, herr error, log *slog.Logger) error {
	if herr != nil {
		if werr := c.App().ErrorHandler(c, herr); werr != nil {
			return werr
		}
	}
	if rec.done && herr == nil {
		// The handler's transaction stored this answer and committed.
		return nil
	}
	status := c.Response().StatusCode()
	bg := context.WithoutCancel(c.UserContext())
	if status >= 500 {
		s.release(bg, rec, log)
		return nil
	}
	body := append([]byte(nil), c.Response().Body()...)
	switch err := rec.CompleteTx(bg, s.DB, status, string(c.Response().Header.ContentType()), body); {
	case err == nil:
	case err == ErrLost:
		// Either the handler completed the key in its own transaction
		// (the normal case for effects) or a takeover happened.
		if done, _ := rec.completed(bg); !done {
			log.WarnContext(bg, "idempotency key taken over while its first attempt ran", "status", status)
		}
	default:
		// The answer could not be stored (the database went away: a
		// restart, a failover). Sent anyway, it would be an answer the key
		// does not keep: a retry would find the key in flight (409) and,
		// after the takeover, could get another answer. The client gets
		// the failure instead (503 for a lost database, with Retry-After),
		// and the key is released for its retry. A handler whose effect
		// committed with the key completed its record in that same
		// transaction, so the release leaves it alone and the retry gets
		// the stored answer.
		log.WarnContext(bg, "store idempotent response failed; answering the failure instead", "status", status, "error", err)
		c.Response().ResetBody()
		c.Response().Header.Del(fiber.HeaderLocation)
		if werr := c.App().ErrorHandler(c, fmt.Errorf("store idempotent response: %w", err)); werr != nil {
			return werr
		}
		s.release(bg, rec, log)
	}
	return nil
}

// release frees rec's key for a retry, now or, when the database does not
// answer, in the background as soon as it does.
func (s *Store) release(ctx context.Context, rec *Record, log *slog.Logger) {
	if err := rec.Release(ctx); err != nil {
		log.WarnContext(ctx, "release idempotency key failed; retrying in the background", "error", err)
		releaseLater(rec.Release, time.Second, log)
	}
}

func (s *Store) observe(o Outcome) {
	if s.Observe != nil {
		s.Observe(o)
	}
}

// releasers bounds the background releases under way at once.
var releasers = make(chan struct{}, 1024)

// releaseLater keeps trying, every second for up to TakeoverAfter, to
// release a key whose release failed: the request failed because the
// database was unreachable, so its release failed too. The key then
// becomes retryable as soon as the database is back, instead of answering
// 409 until the takeover meant for dead processes.
func releaseLater(release func(context.Context) error, every time.Duration, log *slog.Logger) {
	select {
	case releasers <- struct{}{}:
	default:
		log.Error("too many idempotency keys waiting for release; this one waits for the takeover")
		return
	}
	go func() {
		defer func() { <-releasers }()
		for end := time.Now().Add(TakeoverAfter); time.Now().Before(end); {
			time.Sleep(every)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := release(ctx)
			cancel()
			if err == nil {
				return
			}
		}
	}()
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// SendJSON ends a handler that stored its final response itself
// (CompleteTx inside its transaction): err is the transaction's outcome.
// A key a newer attempt took over answers 409; any other error is
// returned as it is; otherwise the record is marked completed and body is
// sent with status. rec may be nil (no Idempotency-Key).
func SendJSON(c *fiber.Ctx, rec *Record, err error, status int, body []byte) error {
	if errors.Is(err, ErrLost) {
		return fault.Wrap(fault.Conflict, "a newer request with this Idempotency-Key took over", err)
	}
	if err != nil {
		return err
	}
	rec.Completed()
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(body)
}
