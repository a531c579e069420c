package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gofiber/fiber/v2"
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

// Middleware enforces the rules of the package doc on one route.
func (s *Store) Middleware(log *slog.Logger) fiber.Handler {
	return func(c *fiber.Ctx) (err error) {
		key := c.Get(KeyHeader)
		if key == "" {
			return ErrMissingKey
		}
		if len(key) > 255 || !printable(key) {
			return ErrBadKey
		}
		key = string([]byte(key)) // copy: fiber reuses header buffers
		ctx := c.UserContext()
		rec, stored, err := s.Begin(ctx, key, c.Method(), c.Path(), Hash(c.Method(), c.Path(), c.BodyRaw()))
		if err != nil {
			switch {
			case errors.Is(err, ErrMismatch):
				s.observe(OutcomeMismatch)
			case errors.Is(err, ErrInFlight):
				s.observe(OutcomeInFlight)
			}
			return err
		}
		if stored != nil {
			s.observe(OutcomeReplayed)
			c.Set(ReplayedHeader, "true")
			if stored.ContentType != "" {
				c.Set(fiber.HeaderContentType, stored.ContentType)
			}
			return c.Status(stored.Status).Send(stored.Body)
		}
		c.Locals(localsKey, rec)
		defer func() {
			if p := recover(); p != nil {
				_ = rec.Release(context.WithoutCancel(ctx))
				panic(p)
			}
		}()
		if herr := c.Next(); herr != nil {
			if werr := c.App().ErrorHandler(c, herr); werr != nil {
				return werr
			}
		}
		status := c.Response().StatusCode()
		bg := context.WithoutCancel(ctx)
		if status >= 500 {
			if err := rec.Release(bg); err != nil {
				log.Warn("release idempotency key failed; retrying in the background", "error", err)
				releaseLater(rec.Release, time.Second, log)
			}
			return nil
		}
		body := append([]byte(nil), c.Response().Body()...)
		switch err := rec.CompleteTx(bg, s.DB, status, string(c.Response().Header.ContentType()), body); {
		case err == nil:
		case err == ErrLost:
			// Either the handler completed the key in its own transaction
			// (the normal case for effects) or a takeover happened.
			if done, _ := rec.completed(bg); !done {
				log.Warn("idempotency key taken over while its first attempt ran", "status", status)
			}
		default:
			log.Error("store idempotent response", "error", err)
		}
		return nil
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
