package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
)

// Episode kinds.
const (
	KindInsolvency    = "insolvency"
	KindInconsistency = "inconsistency"
	KindGasLow        = "gas_low"
)

// haltingKinds are the episode kinds that halt an asset's withdrawals.
var haltingKinds = []string{KindInconsistency, KindInsolvency}

// Episode is one row of reconciliation_episodes.
type Episode struct {
	bun.BaseModel `bun:"table:reconciliation_episodes"`

	ID        int64      `bun:"id,pk,autoincrement" json:"id"`
	Kind      string     `bun:"kind" json:"kind"`
	Asset     string     `bun:"asset" json:"asset"`
	StartedAt time.Time  `bun:"started_at" json:"started_at"`
	Detail    string     `bun:"detail" json:"detail"`
	ReportID  *int64     `bun:"report_id" json:"report_id"`
	AckedAt   *time.Time `bun:"acked_at" json:"acked_at"`
	AckedBy   *string    `bun:"acked_by" json:"acked_by"`
	EndedAt   *time.Time `bun:"ended_at" json:"ended_at"`
	// Shortfall (insolvency, in the asset's smallest units) and Findings
	// (inconsistency) are what the latest report applied to the episode
	// found; the Acked ones what the acknowledgement accepted.
	Shortfall      *int64 `bun:"shortfall" json:"shortfall_units"`
	AckedShortfall *int64 `bun:"acked_shortfall" json:"acked_shortfall_units"`
	Findings       *int64 `bun:"findings" json:"findings"`
	AckedFindings  *int64 `bun:"acked_findings" json:"acked_findings"`
}

// accepted is what the acknowledgement of the episode accepted of what
// its kind measures (the shortfall, the number of findings).
func (e Episode) accepted() *int64 {
	if e.Kind == KindInconsistency {
		return e.AckedFindings
	}
	return e.AckedShortfall
}

// facts are the figures of one custody line that its episodes follow.
type facts struct {
	// shortfall is nil when the chain balance is unknown.
	shortfall *int64
	findings  int64
}

// episodes applies a report to the episodes of each of its custody lines:
// an insolvency episode follows the line's shortfall (a line whose source
// could not be read leaves it as it is), an inconsistency episode its
// ledger findings; then the asset's halt follows its open episodes.
func (s *Service) episodes(ctx context.Context, tx bun.Tx, reportID int64, rep Report, figures map[string]facts) error {
	for _, line := range rep.Custody {
		f := figures[line.Asset]
		if f.shortfall != nil {
			detail := fmt.Sprintf("%s is insolvent: the chain holds %s, users and platform accounts are owed %s (%s of it to platform accounts), %s is expected to be leaving (in flight, or handed to the processor): a shortfall of %s (report %d)",
				line.Asset, deref(line.ChainBalance), line.UserObligations, line.PlatformObligations, line.ExpectedShortfall, deref(line.Shortfall), reportID)
			if err := s.episode(ctx, tx, reportID, KindInsolvency, line.Asset, *f.shortfall > 0, *f.shortfall, detail,
				func(Episode) (bool, error) { return true, nil }); err != nil {
				return err
			}
		}
		detail := fmt.Sprintf("the %s ledger is inconsistent: the %s ledger check of report %d has %d findings that concern it (its unbalanced_entries, materialized_vs_derived_drifts and alerts list them)",
			line.Asset, rep.LedgerCheck.Scope, reportID, f.findings)
		// What a full check found, the incremental one may not read (rows
		// below its boundary): only a full check ends that.
		endable := func(ep Episode) (bool, error) {
			if rep.LedgerCheck.Scope == ledger.ScopeFull || ep.ReportID == nil {
				return true, nil
			}
			var scope string
			err := tx.NewSelect().Model((*Stored)(nil)).ColumnExpr("report -> 'ledger_check' ->> 'scope'").
				Where("id = ?", *ep.ReportID).Scan(ctx, &scope)
			if err != nil && !db.IsNoRows(err) {
				return false, fmt.Errorf("read the report of episode %d: %w", ep.ID, err)
			}
			return scope != ledger.ScopeFull, nil
		}
		if err := s.episode(ctx, tx, reportID, KindInconsistency, line.Asset, f.findings > 0, f.findings, detail, endable); err != nil {
			return err
		}
		if err := syncHalt(ctx, tx, line.Asset); err != nil {
			return err
		}
	}
	return nil
}

// episode applies one report's finding to the open episode of kind for
// code: found with measure (the shortfall, or the number of findings), or
// not found, in which case an open episode ends when endable says so. A
// found measure larger than an acknowledgement accepted ends the
// acknowledged episode and opens a new one, with its alert.
func (s *Service) episode(ctx context.Context, tx bun.Tx, reportID int64, kind, code string, found bool, measure int64, detail string,
	endable func(Episode) (bool, error)) error {
	now := s.now()
	column := "shortfall"
	if kind == KindInconsistency {
		column = "findings"
	}
	var open []Episode
	if err := tx.NewSelect().Model(&open).Where("kind = ? AND asset = ? AND ended_at IS NULL", kind, code).For("UPDATE").Scan(ctx); err != nil {
		return fmt.Errorf("read the %s of %s: %w", kind, code, err)
	}
	end := func(ep Episode, why string) error {
		if _, err := tx.NewUpdate().Model((*Episode)(nil)).Set("ended_at = ?", now).Where("id = ?", ep.ID).Exec(ctx); err != nil {
			return fmt.Errorf("end the %s of %s: %w", kind, code, err)
		}
		s.log().InfoContext(ctx, "reconciliation: episode ended", "kind", kind, "asset", code, "episode_id", ep.ID, "report_id", reportID, "why", why)
		return nil
	}
	if !found {
		for _, ep := range open {
			ok, err := endable(ep)
			if err != nil {
				return err
			}
			if ok {
				if err := end(ep, "a clean report"); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if len(open) > 0 {
		ep := open[0]
		// An acknowledgement that recorded no figure accepted nothing.
		accepted := ep.accepted()
		if accepted == nil {
			accepted = new(int64)
		}
		if ep.AckedAt == nil || measure <= *accepted {
			// Still the same episode: halting (its halt is reasserted by
			// syncHalt) or acknowledged within what was accepted.
			if _, err := tx.NewUpdate().Model((*Episode)(nil)).Set("? = ?", bun.Ident(column), measure).Where("id = ?", ep.ID).Exec(ctx); err != nil {
				return fmt.Errorf("update the %s of %s: %w", kind, code, err)
			}
			return nil
		}
		what := fmt.Sprintf("%d findings", *accepted)
		if kind == KindInsolvency {
			what = "shortfall of " + s.format(ctx, tx, code, *accepted)
		}
		if err := end(ep, "more than was acknowledged"); err != nil {
			return err
		}
		detail += fmt.Sprintf("; more than the %s that %s accepted when acknowledging episode %d", what, deref(ep.AckedBy), ep.ID)
	}
	ep := Episode{Kind: kind, Asset: code, StartedAt: now, Detail: detail, ReportID: &reportID}
	if kind == KindInconsistency {
		ep.Findings = &measure
	} else {
		ep.Shortfall = &measure
	}
	if _, err := tx.NewInsert().Model(&ep).ExcludeColumn("id").Returning("id").Exec(ctx); err != nil {
		return fmt.Errorf("open the %s of %s: %w", kind, code, err)
	}
	if s.Alerts == nil {
		return nil
	}
	typ := AlertInsolvent
	if kind == KindInconsistency {
		typ = AlertInconsistent
	}
	_, _, err := s.Alerts.Raise(ctx, tx, alert.Params{Type: typ, Subject: fmt.Sprintf("%s:report-%d", code, reportID),
		Detail: detail + ". Withdrawals of " + code + " wait for an operator, none is approved, marked broadcast or submitted until a clean report or svc admin reconciliation ack."})
	return err
}

// format renders units of code for a message (plain units when the asset
// cannot be read).
func (s *Service) format(ctx context.Context, idb bun.IDB, code string, units int64) string {
	a, err := (&asset.Store{DB: idb}).Get(ctx, code)
	if err != nil {
		return fmt.Sprintf("%d units", units)
	}
	return a.Format(units) + " " + code
}

func deref(v *string) string {
	if v == nil {
		return "null"
	}
	return *v
}

// lockEpisodes serializes the transactions that open, end or acknowledge
// episodes, until the caller's transaction ends.
func lockEpisodes(ctx context.Context, tx bun.Tx) error {
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('svc:reconciliation_episodes'))"); err != nil {
		return fmt.Errorf("lock the reconciliation episodes: %w", err)
	}
	return nil
}

// syncHalt makes the asset's halt what its open, unacknowledged halting
// episodes say: withdrawals_halted_since the earliest start among them (a
// halt already set keeps its time), withdrawals_halted_by their kinds; no
// halt without one. The row is written only when that changes it.
func syncHalt(ctx context.Context, idb bun.IDB, code string) error {
	_, err := idb.NewRaw(`
WITH h AS (SELECT min(started_at) AS since, array_agg(DISTINCT kind ORDER BY kind) AS kinds
             FROM reconciliation_episodes
            WHERE asset = ? AND kind IN (?) AND ended_at IS NULL AND acked_at IS NULL
           HAVING count(*) > 0)
UPDATE assets a
   SET withdrawals_halted_since = CASE WHEN h.kinds IS NULL THEN NULL ELSE coalesce(a.withdrawals_halted_since, h.since) END,
       withdrawals_halted_by = h.kinds
  FROM (SELECT 1) one LEFT JOIN h ON true
 WHERE a.asset = ?
   AND ((a.withdrawals_halted_since IS NULL) <> (h.kinds IS NULL) OR a.withdrawals_halted_by IS DISTINCT FROM h.kinds)`,
		code, bun.List(haltingKinds), code).Exec(ctx)
	if err != nil {
		return fmt.Errorf("halt %s withdrawals: %w", code, err)
	}
	return nil
}

func (s *Service) openEpisodes(ctx context.Context, idb bun.IDB, kind string) ([]Episode, error) {
	var out []Episode
	err := idb.NewSelect().Model(&out).Where("kind = ? AND ended_at IS NULL", kind).Order("asset").Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("read open %s episodes: %w", kind, err)
	}
	return out, nil
}

// acknowledged returns the open, acknowledged halting episodes.
func (s *Service) acknowledged(ctx context.Context, idb bun.IDB) ([]Episode, error) {
	var out []Episode
	err := idb.NewSelect().Model(&out).Where("kind IN (?) AND ended_at IS NULL AND acked_at IS NOT NULL", bun.List(haltingKinds)).
		Order("asset", "kind").Scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("read acknowledged episodes: %w", err)
	}
	return out, nil
}

// ErrNothingToAck: no open, unacknowledged insolvency or inconsistency
// episode.
var ErrNothingToAck = fault.New(fault.Conflict, "no asset is halted by an insolvency or an inconsistency: nothing to acknowledge")

// AckExpect is what an operator signs to acknowledge the open, not yet
// acknowledged halting episodes eps: action reconciliation.ack, resource
// their asset codes (sorted, comma-separated: the audit row's target), and
// as facts each episode's measure ("BTC.insolvency": the shortfall in the
// asset's smallest units; "BTC.inconsistency": the number of findings)
// and the note when given. Role admin: it accepts a shortfall and lets
// withdrawals pay out again.
func AckExpect(eps []Episode, note string) operator.Expect {
	var codes []string
	facts := map[string]string{}
	for _, ep := range eps {
		if !slices.Contains(codes, ep.Asset) {
			codes = append(codes, ep.Asset)
		}
		v := ep.Shortfall
		if ep.Kind == KindInconsistency {
			v = ep.Findings
		}
		facts[ep.Asset+"."+ep.Kind] = "null"
		if v != nil {
			facts[ep.Asset+"."+ep.Kind] = strconv.FormatInt(*v, 10)
		}
	}
	slices.Sort(codes)
	if note != "" {
		facts["note"] = note
	}
	return operator.Expect{Action: audit.ReconciliationAck, Resource: strings.Join(codes, ","), Facts: facts, Role: operator.Admin}
}

// Unacknowledged reads the open halting episodes of asset code (every
// asset when empty) that no acknowledgement accepted yet: what Ack would
// accept now, for the operator to read and sign.
func (s *Service) Unacknowledged(ctx context.Context, code string) ([]Episode, error) {
	var open []Episode
	q := s.DB.NewSelect().Model(&open).Where("kind IN (?) AND ended_at IS NULL AND acked_at IS NULL", bun.List(haltingKinds)).Order("asset", "kind")
	if code != "" {
		q = q.Where("asset = ?", code)
	}
	if err := q.Scan(ctx); err != nil && !db.IsNoRows(err) {
		return nil, fmt.Errorf("read the episodes to acknowledge: %w", err)
	}
	return open, nil
}

// Ack records that the operator looked at the open insolvency and
// inconsistency episodes (of one asset, or all when code is ""): their
// halts are lifted at once, and each records what it accepts, the
// shortfall (insolvency) or the number of findings (inconsistency) of the
// latest report applied to it. The episodes stay open without halting
// until a clean report ends them, or a report finds more than was
// accepted, which opens a new episode (a new halt, a new alert). It
// returns the episodes it acknowledged. With sig, the acknowledgement is
// the signing operator's (AckExpect of the episodes it accepts, checked
// under the episodes' lock); without, actor's, unless signatures are
// required.
func (s *Service) Ack(ctx context.Context, actor audit.Actor, sig *operator.Envelope, code, note string) ([]Episode, error) {
	if sig == nil && !actor.Valid() {
		return nil, fault.New(fault.Unauthenticated, "the operator is not known")
	}
	if !httpapi.IsStorable(note) || !httpapi.IsStorable(code) {
		return nil, fault.New(fault.Invalid, "the asset and the note must be UTF-8 text without NUL characters")
	}
	var acked []Episode
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		acked = nil
		if err := lockEpisodes(ctx, tx); err != nil {
			return err
		}
		// What the acknowledgement accepts, under the lock: what the
		// operator signed must be exactly that.
		var open []Episode
		sel := tx.NewSelect().Model(&open).Where("kind IN (?) AND ended_at IS NULL AND acked_at IS NULL", bun.List(haltingKinds))
		if code != "" {
			sel = sel.Where("asset = ?", code)
		}
		if err := sel.Scan(ctx); err != nil && !db.IsNoRows(err) {
			return fmt.Errorf("read the episodes to acknowledge: %w", err)
		}
		if len(open) == 0 {
			return ErrNothingToAck
		}
		who, err := s.Signatures.Authorize(ctx, tx, actor, sig, AckExpect(open, note))
		if err != nil {
			return err
		}
		actor = who
		q := tx.NewUpdate().Model(&acked).
			Set("acked_at = ?, acked_by = ?, acked_shortfall = shortfall, acked_findings = findings", s.now(), actor.String()).
			Where("kind IN (?) AND ended_at IS NULL AND acked_at IS NULL", bun.List(haltingKinds))
		if code != "" {
			q = q.Where("asset = ?", code)
		}
		if err := q.Returning("*").Scan(ctx); err != nil && !db.IsNoRows(err) {
			return fmt.Errorf("acknowledge the episodes: %w", err)
		}
		if len(acked) == 0 {
			return ErrNothingToAck
		}
		slices.SortFunc(acked, func(a, b Episode) int { return strings.Compare(a.Asset+" "+a.Kind, b.Asset+" "+b.Kind) })
		var codes []string
		accepted := []map[string]any{}
		for _, ep := range acked {
			if !slices.Contains(codes, ep.Asset) {
				codes = append(codes, ep.Asset)
			}
			accepted = append(accepted, map[string]any{"episode_id": ep.ID, "asset": ep.Asset, "kind": ep.Kind,
				"shortfall_units": ep.AckedShortfall, "findings": ep.AckedFindings})
		}
		for _, c := range codes {
			if err := syncHalt(ctx, tx, c); err != nil {
				return err
			}
		}
		_, err = audit.Record(ctx, tx, s.now(), actor, audit.ReconciliationAck, strings.Join(codes, ","),
			map[string]any{"assets": codes, "note": note, "accepted": accepted})
		return err
	})
	return acked, err
}

// Halts describes the assets whose withdrawals are halted now and why
// (insolvent, inconsistent), for /readyz; nil when none is.
func (s *Service) Halts(ctx context.Context) error {
	var halted []asset.Asset
	if err := s.DB.NewSelect().Model(&halted).Where("withdrawals_halted_since IS NOT NULL").Order("asset").Scan(ctx); err != nil {
		return err
	}
	if len(halted) == 0 {
		return nil
	}
	var parts []string
	for _, a := range halted {
		parts = append(parts, fmt.Sprintf("%s %s since %s", a.Code, HaltedBy(a), a.WithdrawalsHaltedSince.UTC().Format(time.RFC3339)))
	}
	return fmt.Errorf("withdrawals halted: %s (svc admin reconciliation)", strings.Join(parts, "; "))
}

// HaltedBy says why a halted asset is halted: "insolvent", "inconsistent"
// or "inconsistent and insolvent" (a halt without its kinds, written
// before they were recorded, is an insolvency's).
func HaltedBy(a asset.Asset) string {
	var words []string
	for _, k := range a.WithdrawalsHaltedBy {
		switch k {
		case KindInsolvency:
			words = append(words, "insolvent")
		case KindInconsistency:
			words = append(words, "inconsistent")
		default:
			words = append(words, k)
		}
	}
	if len(words) == 0 {
		return "insolvent"
	}
	return strings.Join(words, " and ")
}
