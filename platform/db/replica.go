package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uptrace/bun"

	"svc/platform/logging"
)

// Replica routes the reads whose answer may lag the primary (a user's
// history, the lists) to a read-only pool on a streaming standby
// (DATABASE_READ_URL), and everything else stays on the primary: the
// handle is a type of its own, never a bun.IDB, so no store function, no
// transaction and no money decision can be handed it by accident. A read
// goes through Read, which gives its function the replica's handle only
// while the replica is reachable and its staleness is within the bound,
// and the primary's otherwise. The replica's sessions are read-only
// (default_transaction_read_only), so a write that reached it anyway would
// be refused, not applied.
//
// A nil *Replica (DATABASE_READ_URL unset) reads the primary: no second
// pool, no probe, no change.
//
// # Staleness
//
// Every probe (Run) reads the primary's WAL position, then the position the
// replica has replayed up to. The replica holds everything the primary had
// committed at the time of the newest sample whose position it has
// replayed, so its staleness is at most the age of that sample: a bound
// that holds whether the primary is busy or idle and that keeps growing
// when the replica stops receiving (now() - pg_last_xact_replay_timestamp()
// does neither: it grows on an idle primary, and a standby cut off from
// its primary that has replayed all it received looks current). Between
// probes the bound grows with the time since the probe, so a read is sent
// to the replica only while the bound at that moment is within
// DATABASE_READ_MAX_LAG.
type Replica struct {
	db      *DB
	primary *pgxpool.Pool
	maxLag  time.Duration
	every   time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	state   ReplicaState
	samples []lsnSample // the primary's positions, oldest first

	served    atomic.Int64
	fallbacks [numFallbacks]atomic.Int64
}

// ReplicaStatus says whether reads may go to the replica.
type ReplicaStatus string

// The replica's statuses. Only ReplicaOK sends reads to it.
const (
	ReplicaStarting    ReplicaStatus = "starting"    // not probed yet
	ReplicaOK          ReplicaStatus = "ok"          // reachable, within the bound
	ReplicaLagging     ReplicaStatus = "lagging"     // reachable, beyond the bound (or not known to be within it)
	ReplicaUnreachable ReplicaStatus = "unreachable" // the probe or a read could not reach it
)

// ReplicaState is what the last probe (or a failed read since) found.
type ReplicaState struct {
	Status ReplicaStatus
	// Staleness bounds how far behind the primary the replica was at
	// ProbedAt; meaningful for ok and lagging.
	Staleness time.Duration
	ProbedAt  time.Time
	// Err is why the replica is unreachable (for the logs, never for an
	// anonymous caller).
	Err error
}

// The reasons a read that could have gone to the replica went to the
// primary.
const (
	FallbackUnreachable   = "unreachable"    // the replica could not be reached
	FallbackLagging       = "lagging"        // beyond DATABASE_READ_MAX_LAG, or not probed yet
	FallbackNotReplicated = "not_replicated" // the read named something the replica has not replayed yet (a cursor)
)

const numFallbacks = 3

var fallbackReasons = [numFallbacks]string{FallbackUnreachable, FallbackLagging, FallbackNotReplicated}

type lsnSample struct {
	at  time.Time
	lsn uint64
}

// ReplicaOptions configure OpenReplica.
type ReplicaOptions struct {
	// MaxLag is DATABASE_READ_MAX_LAG: beyond it, reads go to the primary.
	MaxLag time.Duration
	// MaxConns bounds the replica's pool (0: pgx's default).
	MaxConns int
	// Every is the probe interval; 0 takes a fifth of MaxLag, at most a
	// second and at least 100 ms.
	Every time.Duration
	Log   *slog.Logger
	Pool  []Option
}

// OpenReplica makes the replica's read-only pool at url beside primary. It
// does not wait for the replica: one that cannot be reached yet is
// unreachable until a probe reaches it, and reads go to the primary
// meanwhile. Run must run for the replica ever to be used.
func OpenReplica(ctx context.Context, url string, primary *DB, o ReplicaOptions) (*Replica, error) {
	pcfg, err := poolConfig(url, o.MaxConns, o.Pool...)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_READ_URL: %w", err)
	}
	// Read-only sessions: a write sent here by mistake is refused (25006),
	// even where DATABASE_READ_URL names a server that takes writes.
	pcfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > 2*time.Second {
		// An unreachable replica costs a read at most this before it goes
		// to the primary.
		pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	}
	pcfg.AfterConnect = requireSafeStrings
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_READ_URL: %w", err)
	}
	every := o.Every
	if every <= 0 {
		every = min(max(o.MaxLag/5, 100*time.Millisecond), time.Second)
	}
	log := logging.Or(o.Log)
	return &Replica{db: wrap(pool), primary: primary.Pool, maxLag: o.MaxLag, every: every, log: log,
		state: ReplicaState{Status: ReplicaStarting}}, nil
}

// Close releases the replica's connections.
func (r *Replica) Close() {
	if r != nil {
		r.db.Close()
	}
}

// MaxLag is the bound beyond which reads go to the primary.
func (r *Replica) MaxLag() time.Duration { return r.maxLag }

// ReplicaReadTimeout bounds a read on the replica: one it has not answered
// by then (a host gone without closing its connections) runs on the
// primary instead.
const ReplicaReadTimeout = 3 * time.Second

// Read runs fn, which must only read, on the replica when it is usable,
// else on the primary, with ctx (on the replica, ctx bounded by
// ReplicaReadTimeout). When fn fails on the replica because the replica
// could not serve it (a lost connection, a refused session, a query
// cancelled by a recovery conflict, no answer in time), or with one of
// retryOnPrimary (errors that may mean the replica has not replayed a row
// the request names, such as a cursor taken from a fresher page), fn runs
// again on the primary: a replica problem is never the caller's. fn may
// run twice, so it must keep no state between runs.
func (r *Replica) Read(ctx context.Context, primary bun.IDB, fn func(ctx context.Context, idb bun.IDB) error, retryOnPrimary ...error) error {
	if r == nil {
		return fn(ctx, primary)
	}
	if reason := r.unusable(); reason != "" {
		r.fallbacks[reason2index(reason)].Add(1)
		return fn(ctx, primary)
	}
	rctx, cancel := context.WithTimeout(ctx, ReplicaReadTimeout)
	err := fn(rctx, r.db.Bun)
	timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
	cancel()
	switch {
	case err == nil:
		r.served.Add(1)
		return nil
	case ctx.Err() != nil: // the caller's own end, not the replica's
		return err
	case replicaFailure(err) || timedOut:
		r.markUnreachable(err)
		r.fallbacks[reason2index(FallbackUnreachable)].Add(1)
		return fn(ctx, primary)
	}
	for _, e := range retryOnPrimary {
		if errors.Is(err, e) {
			r.fallbacks[reason2index(FallbackNotReplicated)].Add(1)
			return fn(ctx, primary)
		}
	}
	return err
}

// replicaFailure reports an error of the replica's, not of the read: the
// connection, a refusal for a condition of the server (but not 25006, a
// write refused by the read-only session: that is a bug to surface, never
// to retry on the primary), or a query cancelled by a conflict with
// recovery (40001, or 40P01 for a buffer-pin deadlock).
func replicaFailure(err error) bool {
	if IsConnectionLoss(err) || IsTransient(err) {
		return true
	}
	c, _ := pgCode(err)
	return c == "53100" || c == "53200" || c == "53300"
}

func reason2index(reason string) int {
	for i, r := range fallbackReasons {
		if r == reason {
			return i
		}
	}
	return 0
}

// unusable returns why a read may not go to the replica now, "" when it
// may.
func (r *Replica) unusable() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state.Status {
	case ReplicaUnreachable:
		return FallbackUnreachable
	case ReplicaOK:
		if r.state.Staleness+time.Since(r.state.ProbedAt) <= r.maxLag {
			return ""
		}
	}
	return FallbackLagging
}

// State returns what the last probe found.
func (r *Replica) State() ReplicaState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// ReplicaStats are the replica's counters since the process started.
type ReplicaStats struct {
	State ReplicaState
	// Served counts the reads the replica answered; Fallbacks the reads
	// that went to the primary instead, by reason.
	Served    int64
	Fallbacks map[string]int64
}

// Stats returns the replica's counters.
func (r *Replica) Stats() ReplicaStats {
	s := ReplicaStats{State: r.State(), Served: r.served.Load(), Fallbacks: make(map[string]int64, numFallbacks)}
	for i, reason := range fallbackReasons {
		s.Fallbacks[reason] = r.fallbacks[i].Load()
	}
	return s
}

// Run probes the replica every interval until ctx ends.
func (r *Replica) Run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		r.Probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Probe measures the replica's staleness once and updates its state,
// logging only the changes of status.
func (r *Replica) Probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(r.every, 2*time.Second))
	defer cancel()
	if s, err := r.primaryPosition(ctx); err == nil {
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.dropOld(s.at) // also while the replica cannot be read
		r.mu.Unlock()
	}
	replayed, err := r.replayedPosition(ctx)
	now := time.Now()
	if ctx.Err() != nil && err != nil && errors.Is(err, context.Canceled) {
		return // shutting down
	}
	r.mu.Lock()
	prev := r.state
	next := ReplicaState{ProbedAt: now}
	if err != nil {
		next.Status, next.Err = ReplicaUnreachable, err
	} else {
		next.Staleness, next.Status = r.staleness(now, replayed), ReplicaLagging
		if next.Staleness <= r.maxLag {
			next.Status = ReplicaOK
		}
	}
	r.state = next
	r.mu.Unlock()
	r.logChange(prev, next)
}

// staleness bounds how far behind the primary a replica that has replayed
// up to replayed is: the age of the newest sample at or below it, or, when
// there is none, more than the age of the oldest (or than the bound, with
// no sample at all). The samples older than the newest one reached are
// dropped, and the window never holds more than a few times the bound.
// r.mu is held.
func (r *Replica) staleness(now time.Time, replayed uint64) time.Duration {
	reached := -1
	for i, s := range r.samples {
		if s.lsn <= replayed {
			reached = i
		}
	}
	if reached >= 0 {
		r.samples = r.samples[reached:]
		return now.Sub(r.samples[0].at)
	}
	r.dropOld(now)
	if len(r.samples) == 0 {
		return r.maxLag + time.Nanosecond
	}
	return max(now.Sub(r.samples[0].at), r.maxLag+time.Nanosecond)
}

// dropOld drops the samples older than a few times the bound, keeping the
// newest: the window stays bounded whatever the replica does. r.mu is held.
func (r *Replica) dropOld(now time.Time) {
	keep := 0
	for keep < len(r.samples) && now.Sub(r.samples[keep].at) > 4*r.maxLag+time.Minute {
		keep++
	}
	if keep > 0 && keep == len(r.samples) {
		keep--
	}
	r.samples = r.samples[keep:]
}

func (r *Replica) logChange(prev, next ReplicaState) {
	if prev.Status == next.Status {
		return
	}
	switch next.Status {
	case ReplicaOK:
		r.log.Info("read replica in use: lists and history read it", "staleness", next.Staleness.Round(time.Millisecond), "max_lag", r.maxLag)
	case ReplicaLagging:
		r.log.Warn("read replica beyond DATABASE_READ_MAX_LAG: lists and history read the primary until it catches up",
			"staleness_at_least", next.Staleness.Round(time.Millisecond), "max_lag", r.maxLag)
	case ReplicaUnreachable:
		r.log.Warn("read replica unreachable: lists and history read the primary until it answers", "error", next.Err)
	}
}

// markUnreachable records a read's failure on the replica: reads go to the
// primary until a probe reaches it again.
func (r *Replica) markUnreachable(err error) {
	r.mu.Lock()
	prev := r.state
	next := ReplicaState{Status: ReplicaUnreachable, ProbedAt: time.Now(), Err: err}
	if prev.Status != ReplicaUnreachable {
		r.state = next
	}
	r.mu.Unlock()
	r.logChange(prev, next)
}

func (r *Replica) primaryPosition(ctx context.Context) (lsnSample, error) {
	var text string
	at := time.Now()
	if err := r.primary.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
		return lsnSample{}, err
	}
	lsn, err := parseLSN(text)
	return lsnSample{at: at, lsn: lsn}, err
}

// replayedPosition is how far the replica has replayed the primary's WAL
// (its own position when it is not in recovery: DATABASE_READ_URL naming
// the primary itself, or a standby promoted by a failover that is now the
// primary).
func (r *Replica) replayedPosition(ctx context.Context) (uint64, error) {
	var text *string
	err := r.db.Pool.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`).Scan(&text)
	if err != nil {
		return 0, err
	}
	if text == nil {
		return 0, errors.New("the replica has replayed nothing yet")
	}
	return parseLSN(*text)
}

// parseLSN reads PostgreSQL's text form of a WAL position, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("bad WAL position %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad WAL position %q", s)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad WAL position %q", s)
	}
	return h<<32 | l, nil
}
