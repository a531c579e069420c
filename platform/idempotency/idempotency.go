// Package idempotency implements the SPEC's Idempotency-Key rules for every
// mutating /v1 route:
//
//   - missing key: 400;
//   - same key, same method, path and body bytes: the stored status and body
//     are replayed (header Idempotent-Replayed: true) and nothing runs again;
//   - same key with other bytes or another route: 422;
//   - same key while the first attempt is still running: 409 + Retry-After;
//   - an attempt that has held the key for more than 60 s is presumed dead and
//     the retry takes it over;
//   - 2xx and 4xx outcomes are final; a 5xx releases the key so a retry with
//     the same key can complete the operation.
//
// A claimed key is a Record, exposed to the handler (FromCtx). A handler
// whose effect is a database change commits the effect and the key's
// completion in one transaction (Record.CompleteTx). CompleteTx succeeds only
// while the attempt still owns the key, so an attempt that was taken over
// rolls back instead of applying its effect a second time.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"svc/platform/db"
	"svc/platform/fault"
)

// TakeoverAfter is how long an attempt may hold a key before a retry may
// take it over (SPEC: 60 seconds).
const TakeoverAfter = 60 * time.Second

// Errors the middleware returns. The messages are the client's.
var (
	ErrMissingKey = fault.New(fault.BadRequest, "missing Idempotency-Key header: every mutating request needs one")
	ErrBadKey     = fault.New(fault.BadRequest, "Idempotency-Key must be 1 to 255 printable ASCII characters")
	ErrMismatch   = fault.New(fault.Invalid, "Idempotency-Key was already used with a different request body or route")
	ErrInFlight   = fault.New(fault.Conflict, "a request with this Idempotency-Key is still in flight").WithRetryAfter(time.Second)
	// ErrNotClaimed is what a handler under ClaimInHandler returns when its
	// claim found the key already there (Record.Claimed); the middleware
	// then decides as for a key seen before.
	ErrNotClaimed = errors.New("idempotency key not claimed: seen before")
	// ErrLost means the attempt no longer owns its key (a retry took it over
	// after TakeoverAfter); the caller must roll back its transaction.
	ErrLost = errors.New("idempotency key was taken over by a newer attempt")
)

// Store keeps the records.
type Store struct {
	DB  bun.IDB
	Now func() time.Time
	// Observe, when set, is told when the middleware replays a stored
	// response or refuses a key (metrics).
	Observe func(Outcome)
}

// Outcome is what the middleware did with a key other than running the
// request.
type Outcome string

// The outcomes Store.Observe is told of.
const (
	OutcomeReplayed Outcome = "replayed"  // a stored response was sent again
	OutcomeMismatch Outcome = "mismatch"  // 422: the key was used with another request
	OutcomeInFlight Outcome = "in_flight" // 409: the key's first attempt still runs
)

// Record is one claimed key, owned by the current attempt.
type Record struct {
	// Key is the client's Idempotency-Key, as sent.
	Key string
	// stored is the record's key in its namespace (StoredKey).
	stored string
	token  uuid.UUID
	store  *Store
	// pending is the claim a handler under ClaimInHandler has yet to make;
	// nil once the key is claimed.
	pending *pendingClaim
	// done is set once the handler's own transaction stored the final
	// response and committed (Completed): the middleware then stores
	// nothing more.
	done bool
}

// pendingClaim is what claiming a key needs besides the record.
type pendingClaim struct {
	method, path string
	hash         []byte
}

// Pending returns a record of key that its holder claims in its own first
// statement (ClaimExpr, Claimed), as a handler under ClaimInHandler does;
// for callers outside HTTP (benchmarks, tests) that do the same.
func (s *Store) Pending(key, method, path string, hash []byte) *Record {
	return &Record{Key: key, stored: StoredKey(path, key), token: uuid.New(), store: s,
		pending: &pendingClaim{method: method, path: path, hash: hash}}
}

// ClaimExpr is an SQL expression that claims the record's key and is true
// when it did (idempotency_claim, migration 0008): for the first statement
// of a handler under ClaimInHandler, which must run on the pool, not in a
// transaction. For a record claimed already it is the constant true.
func (r *Record) ClaimExpr() schema.QueryWithArgs {
	p := r.pending
	if p == nil {
		return bun.SafeQuery("true")
	}
	return bun.SafeQuery("idempotency_claim(?, ?, ?, ?, ?::uuid, ?)", r.stored, p.method, p.path, p.hash, r.token.String(), r.store.Now().UTC())
}

// Unclaimed returns the record's key as stored, while its claim is still
// to be made (ClaimInHandler), for a handler that claims the key and
// stores its response in one statement (QueueClaimComplete).
func (r *Record) Unclaimed() (string, bool) {
	return r.stored, r.pending != nil
}

// Claimed takes the value of ClaimExpr: the key is now the attempt's, or,
// when it was there already, ErrNotClaimed, which the handler returns
// before doing anything.
func (r *Record) Claimed(ok bool) error {
	if !ok {
		return ErrNotClaimed
	}
	r.pending = nil
	return nil
}

// The namespaces of the stored keys: every key is stored with the prefix
// of its route group, so no client key can name another group's record.
const (
	AdminPrefix    = "admin:"
	PlatformPrefix = "platform:"
)

// StoredKey is the record's key for a client's key on path. Keys are
// scoped by the route group that needs the same API key scope: the admin
// routes (/v1/admin/..., matched as fiber routes them, whatever the case)
// have a namespace of their own, so a readwrite key can neither squat a
// key an operator will use (their call would get 422) nor replay an
// operator's stored answer, and a client key that itself starts with
// "admin:" stays in the platform's namespace. The platform routes share
// one namespace across every readwrite and admin key: a platform that
// rotates its API key retries with the same Idempotency-Key under the new
// one and gets the first answer, as the SPEC's retry rule needs.
func StoredKey(path, key string) string {
	if strings.HasPrefix(strings.ToLower(path), "/v1/admin/") {
		return AdminPrefix + key
	}
	return PlatformPrefix + key
}

// Stored is a final response kept for replay.
type Stored struct {
	Status      int
	ContentType string
	Body        []byte
}

type row struct {
	bun.BaseModel `bun:"table:idempotency_keys"`

	Key            string     `bun:"key,pk"`
	Method         string     `bun:"method"`
	Path           string     `bun:"path"`
	RequestHash    []byte     `bun:"request_hash"`
	State          string     `bun:"state"`
	LockToken      *uuid.UUID `bun:"lock_token,type:uuid"`
	LockedAt       *time.Time `bun:"locked_at"`
	ResponseStatus *int       `bun:"response_status"`
	ResponseBody   []byte     `bun:"response_body"`
	ResponseType   *string    `bun:"response_type"`
	CreatedAt      time.Time  `bun:"created_at"`
	CompletedAt    *time.Time `bun:"completed_at"`
}

// Hash is the request fingerprint: method, path and the exact body bytes.
func Hash(method, path string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", method, path)
	h.Write(body)
	return h.Sum(nil)
}

// Begin claims key for a request. It returns exactly one of: a Record the
// caller now owns, a Stored response to replay, or an error (ErrMismatch,
// ErrInFlight, or a database failure).
func (s *Store) Begin(ctx context.Context, key, method, path string, hash []byte) (*Record, *Stored, error) {
	client, key := key, StoredKey(path, key)
	// The common case, a new key, is one statement (idempotency_claim in
	// migration 0008); a key seen before takes the transaction below.
	// Only on the pool: in a caller's transaction the claim's asynchronous
	// commit would cover the caller's writes too.
	if pool, ok := s.DB.(*bun.DB); ok {
		if q, err := db.SQLOf(pool); err == nil {
			tok := uuid.New()
			var claimed bool
			if err := q.QueryRowContext(ctx, "SELECT idempotency_claim($1, $2, $3, $4, $5, $6)",
				key, method, path, hash, tok, s.Now().UTC()).Scan(&claimed); err != nil {
				return nil, nil, fmt.Errorf("claim idempotency key: %w", err)
			}
			if claimed {
				return &Record{Key: client, stored: key, token: tok, store: s}, nil, nil
			}
		}
	}
	var (
		rec    *Record
		stored *Stored
	)
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		rec, stored = nil, nil
		now := s.Now().UTC()
		tok := uuid.New()
		r := &row{Key: key, Method: method, Path: path, RequestHash: hash, State: "in_flight", LockToken: &tok, LockedAt: &now, CreatedAt: now}
		res, err := tx.NewInsert().Model(r).On("CONFLICT (key) DO NOTHING").Exec(ctx)
		if err != nil {
			return fmt.Errorf("claim idempotency key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			rec = &Record{Key: client, stored: key, token: tok, store: s}
			return nil
		}
		var cur row
		if err := tx.NewSelect().Model(&cur).Where("key = ?", key).For("UPDATE").Scan(ctx); err != nil {
			return fmt.Errorf("read idempotency key: %w", err)
		}
		if cur.Method != method || cur.Path != path || !bytes.Equal(cur.RequestHash, hash) {
			return ErrMismatch
		}
		if cur.State == "completed" {
			stored = &Stored{Status: *cur.ResponseStatus, Body: cur.ResponseBody}
			if cur.ResponseType != nil {
				stored.ContentType = *cur.ResponseType
			}
			return nil
		}
		if cur.LockedAt != nil && now.Sub(*cur.LockedAt) <= TakeoverAfter {
			return inFlight(now.Sub(*cur.LockedAt))
		}
		// Released after a 5xx, or held by an attempt dead for over 60 s.
		if _, err := tx.NewUpdate().Model((*row)(nil)).Set("lock_token = ?, locked_at = ?", tok, now).
			Where("key = ?", key).Exec(ctx); err != nil {
			return fmt.Errorf("take over idempotency key: %w", err)
		}
		rec = &Record{Key: client, stored: key, token: tok, store: s}
		return nil
	})
	return rec, stored, err
}

// freshAttempt is how long an attempt holding a key is presumed alive and
// about to answer: a retry within it is told to come back in a second.
const freshAttempt = 5 * time.Second

// inFlight is ErrInFlight with a Retry-After that tells the truth: a
// second while the attempt holding the key is young (it is most likely
// finishing), else the time left until the retry may take the key over
// (an attempt that old is most likely dead, and asking every second
// before then gets the same 409).
func inFlight(age time.Duration) error {
	if age < freshAttempt {
		return ErrInFlight
	}
	left := TakeoverAfter - age + time.Second // the takeover needs more than TakeoverAfter
	return ErrInFlight.WithRetryAfter(max(time.Second, left.Truncate(time.Second)))
}

// CompleteTx stores the final response inside the caller's transaction,
// which must also hold the request's effect. It fails with ErrLost when
// the attempt no longer owns the key; the caller must then roll back.
func (r *Record) CompleteTx(ctx context.Context, tx bun.IDB, status int, contentType string, body []byte) error {
	res, err := tx.NewUpdate().Model((*row)(nil)).
		Set("state = 'completed', response_status = ?, response_type = ?, response_body = ?, completed_at = ?, lock_token = NULL, locked_at = NULL",
			status, contentType, body, r.store.Now().UTC()).
		Where("key = ? AND lock_token = ? AND state = 'in_flight'", r.stored, r.token).Exec(ctx)
	if err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return ErrLost
	}
	return nil
}

// QueueComplete queues on b the statement that stores the request's final
// response, for a handler that sends its effect and the response in one
// round trip (db.Pipeline), where they commit together. When the key was
// taken over by a newer attempt the statement raises
// (idempotency_require_claim, migration 0013), so the effect is rolled
// back with it. Read its result with ReadComplete, in queue order.
func (r *Record) QueueComplete(b *pgx.Batch, status int, contentType string, body []byte) {
	b.Queue(`WITH done AS (
  UPDATE idempotency_keys
     SET state = 'completed', response_status = $1, response_type = $2, response_body = $3, completed_at = $4,
         lock_token = NULL, locked_at = NULL
   WHERE key = $5 AND lock_token = $6 AND state = 'in_flight'
  RETURNING 1)
SELECT idempotency_require_claim(EXISTS (SELECT 1 FROM done))`, status, contentType, body, r.store.Now().UTC(), r.stored, r.token)
}

// QueueClaimComplete queues on b the statement that claims the record's
// unclaimed key and stores the request's final response at once, for a
// handler whose effect and response commit together in one round trip
// and that has not claimed the key (Unclaimed): the key is then never in
// flight. When the key is there already (an earlier or a concurrent
// attempt), the insert fails with a unique violation, after waiting for
// the attempt that holds it to end, and the effect is rolled back with it:
// the handler then claims the key the ordinary way, which finds it. Read
// its result with ReadClaimComplete, in queue order, and call Completed
// once the batch committed.
func (r *Record) QueueClaimComplete(b *pgx.Batch, status int, contentType string, body []byte) {
	p := r.pending
	if p == nil {
		// Claimed already: complete the claim.
		r.QueueComplete(b, status, contentType, body)
		return
	}
	now := r.store.Now().UTC()
	// $1 as text: a parameter typed as the column's domain (migration
	// 0029) is read by domain_in, which prepares the domain's rules anew
	// for every parameter of every statement; a text is checked by the
	// rules the plan prepared once.
	b.Queue(`INSERT INTO idempotency_keys (key, method, path, request_hash, state, response_status, response_type, response_body, created_at, completed_at)
VALUES ($1::text, $2, $3, $4, 'completed', $5, $6, $7, $8, $8)`, r.stored, p.method, p.path, p.hash, status, contentType, body, now)
}

// ReadClaimComplete reads the result of the statement QueueClaimComplete
// queued.
func (r *Record) ReadClaimComplete(br pgx.BatchResults) error {
	if r.pending == nil {
		return r.ReadComplete(br)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("claim and complete idempotency key: %w", err)
	}
	return nil
}

// Completed tells the record that the handler's transaction, which stored
// the final response (CompleteTx, QueueComplete, QueueClaimComplete),
// committed: the key is claimed and holds the answer, and the middleware
// has nothing left to store (without it, the middleware's own attempt to
// store the answer finds the key completed, and checks that it is: two
// statements for nothing). Call it only after the commit, and only when the
// handler answers with what it stored.
func (r *Record) Completed() {
	if r == nil {
		return
	}
	r.pending, r.done = nil, true
}

// MarkCompleted calls Completed on rec when rec has it (a *Record; a
// test's completer): for handlers that take their record as an interface
// of their own.
func MarkCompleted(rec any) {
	if m, ok := rec.(interface{ Completed() }); ok {
		m.Completed()
	}
}

// codeClaimLost is idempotency_require_claim's SQLSTATE.
const codeClaimLost = "SV001"

// ReadComplete reads the result of the statement QueueComplete queued: an
// error wrapping both ErrLost and the database's refusal when the key was
// taken over (nothing of the batch committed).
func (r *Record) ReadComplete(br pgx.BatchResults) error {
	var ok bool
	return CompleteError(br.QueryRow().Scan(&ok))
}

// CompleteError is the error of a statement that stored a request's final
// response (QueueComplete, CompleteWithEffect), as the caller returns it:
// one wrapping both ErrLost and the database's refusal when the key was
// taken over (nothing the statement did is applied); nil for nil.
func CompleteError(err error) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == codeClaimLost:
		return fmt.Errorf("complete idempotency key: %w (%w)", ErrLost, err)
	case err != nil:
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	return nil
}

// CompleteWithEffect returns one statement, and its arguments, that
// applies effect and, only when effect applied, stores the request's final
// response: for a handler whose effect is a single data-modifying
// statement, which then commits with the response in one round trip, no
// transaction around them. effect is an INSERT, UPDATE or DELETE with
// parameters $1 to $len(args) that returns a row when it applied (RETURNING
// 1). The statement returns one boolean: whether effect applied; when it
// did not, nothing changed and the key is still the attempt's. When effect
// applied but the attempt no longer owns its key (a newer attempt took it
// over), the statement fails (idempotency_require_claim) and nothing is
// applied: CompleteError turns that into ErrLost. ok is false for a record
// whose claim is still to be made (ClaimInHandler): such a handler claims
// with its first statement instead.
func (r *Record) CompleteWithEffect(effect string, args []any, status int, contentType string, body []byte) (query string, all []any, ok bool) {
	if r.pending != nil {
		return "", nil, false
	}
	n := len(args)
	query = fmt.Sprintf(`WITH effect AS (%s),
done AS (
  UPDATE idempotency_keys
     SET state = 'completed', response_status = $%d, response_type = $%d, response_body = $%d, completed_at = $%d,
         lock_token = NULL, locked_at = NULL
   WHERE key = $%d::text AND lock_token = $%d::uuid AND state = 'in_flight' AND EXISTS (SELECT 1 FROM effect)
  RETURNING 1)
SELECT CASE WHEN EXISTS (SELECT 1 FROM effect) THEN idempotency_require_claim(EXISTS (SELECT 1 FROM done)) ELSE false END`,
		effect, n+1, n+2, n+3, n+4, n+5, n+6)
	all = append(slices.Clip(args), status, contentType, body, r.store.Now().UTC(), r.stored, r.token)
	return query, all, true
}

// completed reports whether the record's key holds a final response.
func (r *Record) completed(ctx context.Context) (bool, error) {
	return r.store.DB.NewSelect().Model((*row)(nil)).Where("key = ? AND state = 'completed'", r.stored).Exists(ctx)
}

// Release gives up the key without a final response (after a 5xx or a
// panic), keeping its fingerprint, so a retry can proceed at once.
func (r *Record) Release(ctx context.Context) error {
	_, err := r.store.DB.NewUpdate().Model((*row)(nil)).Set("lock_token = NULL, locked_at = NULL").
		Where("key = ? AND lock_token = ? AND state = 'in_flight'", r.stored, r.token).Exec(ctx)
	return err
}

// Prune deletes records created before cutoff and returns how many.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := s.DB.NewDelete().Model((*row)(nil)).Where("created_at < ?", cutoff).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
