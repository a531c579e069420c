package transfer

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/idempotency"
)

// The common case of POST /v1/transfers is a new Idempotency-Key, known
// enabled assets, a free client_reference and legs that fit. The ordinary
// way (Create) claims the key, reads the key's transfer, the assets and
// the client_reference first, then writes a statement per row. createFast
// makes that case one round trip, with no read before it (but the
// assets' decimals, read once when the copy lacks an asset): one batch
// sent as one implicit transaction (db.Pipeline), which commits after its
// last statement or not at all:
//
//   - the key's claim together with its stored 201
//     (idempotency.Record.QueueClaimComplete);
//   - one statement that checks the assets against this service's copy of
//     their decimals (transfer_assets_usable, migration 0045) and writes
//     the transfer, its legs, its parties and the event's row;
//   - ledger.LockAccounts' statement;
//   - each leg's posting (strict: a leg that does not fit raises).
//
// The event's first attempt is woken once the batch committed
// (event.Service.WakeAfter). When the event needs a delivery job of its
// own in the transaction (a sampled trace; River's insert takes a
// database/sql transaction and cannot be queued on a batch), the same
// batch runs inside BEGIN and COMMIT (db.BatchTx) after that insert:
// three round trips. The one round trip cut the api's CPU per transfer
// from 0.51-0.57 ms to 0.39-0.50 in BenchmarkHTTPTransfers (the BEGIN and
// the COMMIT are each a message, a wakeup and a reply); the database's
// server CPU did not move beyond the noise (BenchmarkServerCPU:
// docs/performance.md).
//
// The account rows are locked last, in the batch, and held only until
// the commit that ends it.
//
// Anything refused inside rolls all of it back: a key seen before (the
// claim's unique violation), a client_reference another transfer has (its
// unique index), an asset unknown, disabled or not as copied (SV003), a
// leg short of funds. The handler then returns idempotency.ErrNotClaimed,
// and the middleware takes the key's ordinary path (a replay, 409 while
// another attempt runs, 422 for another request) or claims it and runs
// Create again the ordinary way, which gives the exact answer it would
// have given without the fast path. So the fast path decides only how
// fast an answer comes, never what it is: the key's answer commits with
// the transfer or not at all, and the ordinary path finds it when it did.

// codeAssetsNotAsCopied is transfer_assets_usable's refusal.
const codeAssetsNotAsCopied = "SV003"

// decimalsCopy is every asset's decimals as the ordinary way last read
// them.
type decimalsCopy struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *decimalsCopy) put(m map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = m
}

// of returns the decimals of the legs' assets, each once in code order,
// and false when the copy lacks one.
func (c *decimalsCopy) of(legs []LegParams) (map[string]int, []string, []int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dec := make(map[string]int, 1)
	for _, l := range legs {
		d, ok := c.m[l.Asset]
		if !ok {
			return nil, nil, nil, false
		}
		dec[l.Asset] = d
	}
	codes := make([]string, 0, len(dec))
	for code := range dec {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	decimals := make([]int32, len(codes))
	for i, code := range codes {
		decimals[i] = int32(dec[code])
	}
	return dec, codes, decimals, true
}

// claimCompleter is a Completer whose key the creation's transaction
// claims together with the stored answer (*idempotency.Record under
// idempotency.ClaimInHandler).
type claimCompleter interface {
	Unclaimed() (string, bool)
	QueueClaimComplete(b *pgx.Batch, status int, contentType string, body []byte)
	ReadClaimComplete(br pgx.BatchResults) error
	Completed()
}

// outboxEmitter writes an event whose row the caller writes itself
// (*event.Service).
type outboxEmitter interface {
	Prepare(typ event.Type, data any) (event.Event, error)
	QueueDelivery(ctx context.Context, tx *sql.Tx, e event.Event) error
	WakeAfter(ctx context.Context, e event.Event) (func(), bool)
}

// FastCreated is how many transfers this service created the fast way
// since it started (the rest took the ordinary way).
func (s *Service) FastCreated() int64 { return s.fast.Load() }

// createFast creates the transfer p describes in one transaction that
// also claims rec's key (see above). It returns idempotency.ErrNotClaimed,
// having committed nothing, whenever the ordinary way must decide; any
// other error is a commit whose outcome is unknown (the connection lost).
func (s *Service) createFast(ctx context.Context, p CreateParams, rec claimCompleter) (View, []byte, error) {
	ev, ok := s.Events.(outboxEmitter)
	if !ok {
		return View{}, nil, idempotency.ErrNotClaimed
	}
	dec, codes, decimals, ok := s.copies.of(p.Legs)
	if !ok {
		// First use of an asset: copy the assets once. The transaction
		// checks the copy all the same.
		all, err := asset.Decimals(ctx, s.DB)
		if err != nil {
			return View{}, nil, idempotency.ErrNotClaimed
		}
		s.copies.put(all)
		if dec, codes, decimals, ok = s.copies.of(p.Legs); !ok {
			return View{}, nil, idempotency.ErrNotClaimed // an unknown asset: the ordinary way's 404
		}
	}
	t, err := s.newTransfer(p)
	if err != nil {
		return View{}, nil, err
	}
	v := render(t, dec)
	body, err := json.Marshal(v)
	if err != nil {
		return View{}, nil, err
	}
	e, err := ev.Prepare(event.TransferCompleted, eventData(v))
	if err != nil {
		return View{}, nil, err
	}

	var b pgx.Batch
	rec.QueueClaimComplete(&b, http.StatusCreated, "application/json", body)
	stmt, args, err := insertStatement(t, codes, decimals, e)
	if err != nil {
		return View{}, nil, err
	}
	b.Queue(stmt, args...)
	if err := ledger.QueueLockAccounts(&b, lockRefs(t.Legs)); err != nil {
		return View{}, nil, err
	}
	posts := make([]*ledger.QueuedPost, len(t.Legs))
	for i, l := range t.Legs {
		if posts[i], err = ledger.QueueTransferLeg(&b, l.Asset, l.From(), l.To(), l.Amount, SourceRef(t.ID, i), legMemo(i, len(t.Legs))); err != nil {
			return View{}, nil, err
		}
	}

	read := func(br pgx.BatchResults) error {
		if err := rec.ReadClaimComplete(br); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("insert transfer %s: %w", t.ID, err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("transfer %s: lock accounts: %w", t.ID, err)
		}
		for _, q := range posts {
			if _, err := q.Read(br); err != nil {
				return err
			}
		}
		return nil
	}
	wake, pipelined := ev.WakeAfter(ctx, e)
	committing := pipelined // a pipeline's error after the send may be its commit's
	if pipelined {
		err = db.Pipeline(ctx, s.DB, &b, read)
	} else {
		err = db.BatchTx(ctx, s.DB, func(ctx context.Context, tx *sql.Tx, send db.SendBatch) error {
			if err := ev.QueueDelivery(ctx, tx, e); err != nil {
				return err
			}
			err := send(&b, read)
			committing = err == nil
			return err
		})
	}
	var pe *pgconn.PgError
	switch {
	case err == nil:
		rec.Completed()
		if wake != nil {
			wake()
		}
		s.fast.Add(1)
		return v, body, nil
	case expectedRefusal(err):
		// The server refused a statement: nothing of the batch committed.
		return View{}, nil, idempotency.ErrNotClaimed
	case committing && !errors.As(err, &pe):
		// The commit's outcome is unknown: the middleware finds the key
		// completed with this answer, or claims and releases it.
		return View{}, nil, fmt.Errorf("create transfer: %w", err)
	}
	s.log().WarnContext(ctx, "transfer: fast creation failed; creating it the ordinary way", "error", err)
	return View{}, nil, idempotency.ErrNotClaimed
}

// expectedRefusal reports the refusals the ordinary way answers: a key
// seen before, a client_reference or an Idempotency-Key another transfer
// has, an asset not as copied, a leg short of funds.
func expectedRefusal(err error) bool {
	var pe *pgconn.PgError
	return db.IsUniqueViolation(err, "idempotency_keys_pkey") || db.IsUniqueViolation(err, "transfers_client_reference_key") ||
		db.IsUniqueViolation(err, "transfers_idempotency_key_key") || errors.Is(err, ledger.ErrInsufficientFunds) ||
		errors.As(err, &pe) && pe.Code == codeAssetsNotAsCopied
}

// insertStatement is the one statement that checks the assets against
// the copy (codes and their decimals) and writes t, its legs, its parties
// and e's row.
func insertStatement(t Transfer, codes []string, decimals []int32, e event.Event) (string, []any, error) {
	meta, err := json.Marshal(t.Metadata)
	if err != nil {
		return "", nil, err
	}
	n := len(t.Legs)
	legs, assets, fromOwners, toOwners := make([]int32, n), make([]string, n), make([]string, n), make([]string, n)
	fromPlatform, toPlatform, amounts := make([]bool, n), make([]bool, n), make([]int64, n)
	for i, l := range t.Legs {
		legs[i], assets[i], amounts[i] = int32(l.Index), l.Asset, l.Amount
		fromPlatform[i], fromOwners[i], toPlatform[i], toOwners[i] = l.FromPlatform, l.FromOwner, l.ToPlatform, l.ToOwner
	}
	parties := t.parties()
	partyPlatform, partyOwner := make([]bool, len(parties)), make([]string, len(parties))
	for i, p := range parties {
		partyPlatform[i], partyOwner[i] = p.Platform, p.Owner
	}
	args := []any{codes, decimals, t.ID, t.IdempotencyKey, t.Description, meta, t.ClientReference, t.LegCount, t.CreatedAt,
		legs, assets, fromPlatform, fromOwners, toPlatform, toOwners, amounts, partyPlatform, partyOwner}
	evInsert, evArgs := e.RowInsert(len(args) + 1)
	args = append(args, evArgs...)
	return `WITH ok AS (SELECT transfer_assets_usable($1::text[], $2::int[]) AS ok),
t AS (INSERT INTO transfers (id, idempotency_key, description, metadata, client_reference, leg_count, created_at)
    SELECT $3::uuid, $4::text, $5::text, $6::jsonb, $7::text, $8::int, $9::timestamptz FROM ok WHERE ok.ok
    RETURNING id),
l AS (INSERT INTO transfer_legs (transfer_id, leg, asset, from_platform, from_owner, to_platform, to_owner, amount)
    SELECT t.id, v.leg, v.asset, v.from_platform, v.from_owner, v.to_platform, v.to_owner, v.amount
      FROM t, unnest($10::int[], $11::text[], $12::bool[], $13::text[], $14::bool[], $15::text[], $16::bigint[])
           AS v (leg, asset, from_platform, from_owner, to_platform, to_owner, amount)),
p AS (INSERT INTO transfer_parties (platform, owner, created_at, transfer_id)
    SELECT v.platform, v.owner, $9::timestamptz, t.id FROM t, unnest($17::bool[], $18::text[]) AS v (platform, owner)),
e AS (` + evInsert + `)
SELECT count(*) FROM t`, args, nil
}

// newTransfer is the transfer p describes, with a new id, as of now.
func (s *Service) newTransfer(p CreateParams) (Transfer, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Transfer{}, fmt.Errorf("new transfer id: %w", err)
	}
	t := Transfer{ID: id, Description: p.Description, Metadata: p.Metadata, ClientReference: p.ClientReference,
		LegCount: len(p.Legs), CreatedAt: s.now(), Legs: make([]Leg, len(p.Legs))}
	if t.Metadata == nil {
		t.Metadata = map[string]string{}
	}
	if p.IdempotencyKey != "" {
		t.IdempotencyKey = &p.IdempotencyKey
	}
	for i, l := range p.Legs {
		t.Legs[i] = Leg{TransferID: id, Index: i, Asset: l.Asset, FromPlatform: l.From.Platform, FromOwner: l.From.ID,
			ToPlatform: l.To.Platform, ToOwner: l.To.ID, Amount: l.Amount}
	}
	return t, nil
}
