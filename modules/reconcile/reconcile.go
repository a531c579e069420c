// Package reconcile owns the ledger and custody reconciliation: the report
// of the SPEC (the ledger check, then per asset what the ledger says is in
// custody and owed against what the processor's wallets and the TRON chain
// hold), its history, the insolvency and inconsistency episodes it opens
// and closes (an insolvent asset, or one whose ledger is inconsistent,
// halts its withdrawals until a clean report or an operator's
// acknowledgement), and the hot wallet's gas check.
//
// # The custody line
//
// For each asset, in smallest units:
//
//	ledger_custody     the custody account: what the wallets should hold
//	ledger_in_flight   payouts broadcast and not yet confirmed
//	ledger_transfer    the transfer account: what custody sent to the other
//	                   custody of the same coin (BTC and BTC_LN) less what
//	                   it received, as booked (ledger.BookTransfer)
//	user_obligations   users' available + held (+ the suspense account,
//	                   which no flow posts to today: money in the deposit
//	                   review queue is in no account until it is credited)
//	chain_balance      what the source reports; null when it cannot be read
//	expected_shortfall ledger_in_flight plus the gross of withdrawals that
//	                   may have left the wallet before the ledger recorded a
//	                   broadcast (withdrawal.LeavingCustody)
//	difference         chain_balance - ledger_custody (negative is bad)
//	ledger_transfer    the transfer account: sent to the pair's other
//	                   custody less received (ledger.BookTransfer), which
//	                   still backs this asset's users
//	shortfall          (user_obligations - expected_shortfall)
//	                   - (chain_balance + ledger_transfer): what the chain
//	                   lacks to cover what users are owed (zero or
//	                   negative: covered); null with chain_balance
//	insolvent          shortfall > 0
//	inconsistent       the ledger check has findings of the asset (an
//	                   unbalanced entry, a balance that drifted from its
//	                   postings, a negative balance, a hold that is not its
//	                   open withdrawals' gross), or findings whose asset
//	                   cannot be told, which concern every asset
//
// and the asset's latest proof of liabilities (modules/liabilities): the
// root of its Merkle sum tree, the total that root commits to (users'
// available + held), the snapshot's time and id; null before the first
// snapshot. The hourly run takes a new snapshot first, so its report shows
// the tree of that hour. The tree's total is users' available + held at
// its own snapshot of the ledger: when nothing was posted in between, it
// equals user_obligations less the suspense account.
//
// The sources: BTC, the processor's on-chain wallet balance (confirmed and
// unconfirmed: a payout leaves custody when it is broadcast, and deposits
// not yet confirmed only make the chain look richer); BTC_LN, the local
// balance of the processor's Lightning channels; USDT_TRC20, the USDT
// balance of the pool addresses and the hot wallet on TronGrid. They are
// read in parallel, each with its own timeout, before and outside any
// database transaction; a source that cannot be read gives null, never 0,
// and makes the report unhealthy with the reason.
//
// # Episodes
//
// An insolvent asset opens an insolvency episode, and an inconsistent one
// an inconsistency episode (one of each kind at a time per asset). While
// an episode of either kind is open and not acknowledged,
// assets.withdrawals_halted_since is set (withdrawals_halted_by names the
// kinds): new withdrawals of the asset wait for an operator with reason
// insolvency or inconsistency, no withdrawal of it is approved (409) or
// marked broadcast (409), the submitter hands nothing of it to the
// processor, and /readyz's reconciliation component is degraded with the
// reason. One operator alert per episode. A later report that finds the
// asset solvent (consistent) ends the episode; an inconsistency found by a
// full ledger check ends only at a consistent full check, since the
// incremental one does not read below its boundary. A source that cannot
// be read changes nothing about an insolvency.
//
// An operator who has looked acknowledges the open episodes (svc admin
// reconciliation ack): that lifts the halt at once and records what it
// accepts, the episode's latest shortfall (insolvency) or number of
// findings (inconsistency). The acknowledged episode stays open without
// halting; a later report that finds a larger shortfall, or more
// findings, than was accepted ends it and opens a new episode: a new halt
// and a new alert.
// The gas check opens a gas_low episode while the hot wallet's TRX is
// below TRX_ALERT_THRESHOLD, with one alert each, and ends it when the
// balance recovers.
package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/platform/btcpay"
	"svc/platform/chain"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// Wallet reads the processor's balances (*btcpay.Client).
type Wallet interface {
	WalletOverview(ctx context.Context) (btcpay.WalletOverview, error)
	LightningBalance(ctx context.Context) (btcpay.LightningBalance, error)
}

// Tron reads TRON balances (*tron.Client).
type Tron interface {
	USDTBalance(ctx context.Context, addr chain.TronAddress) (int64, error)
	TRXBalance(ctx context.Context, addr chain.TronAddress) (int64, error)
}

// Alerter raises operator alerts (*alert.Service).
type Alerter interface {
	Raise(ctx context.Context, idb bun.IDB, p alert.Params) (alert.Alert, bool, error)
}

// Config is the reconciliation settings.
type Config struct {
	// USDTAddresses are the TRON addresses whose USDT is custody: the
	// processor's pool and the hot wallet.
	USDTAddresses []string
	// HotWallet is the TRON address whose TRX pays the gas; "" turns the
	// gas check off.
	HotWallet string
	// TRXAlertThreshold is in sun (1 TRX = 1,000,000 sun).
	TRXAlertThreshold int64
	// SourceTimeout bounds each balance source.
	SourceTimeout time.Duration
	// FullCheckEvery is how long the hourly run goes on with the
	// incremental ledger check after the last stored report with a full
	// one before it runs the full one (0: never by itself; RunHourly).
	FullCheckEvery time.Duration
}

// Service is the reconciliation module.
type Service struct {
	DB *bun.DB
	// Wallet is nil without a processor, Tron without a TRON node: their
	// assets' chain balance is then null ("not configured").
	Wallet Wallet
	Tron   Tron
	// Checks are the ledger checks of the modules that own entries
	// (withdrawal.CheckHolds), run in the ledger check's snapshot; Credits
	// is the deposits' (deposit.CheckCredits).
	Checks  []ledger.WithdrawalCheck
	Credits ledger.WithdrawalCheck
	// Leaving is, per asset, money that may have left the wallet before
	// the ledger recorded a broadcast (withdrawal.LeavingCustody): an
	// expected shortfall too.
	Leaving func(ctx context.Context, idb bun.IDB) (map[string]int64, error)
	Alerts  Alerter
	// Liabilities takes the proof of liabilities with each hourly run and
	// gives each line its latest root; nil leaves the liabilities fields
	// null.
	Liabilities *liabilities.Service
	Now         func() time.Time
	Log         *slog.Logger
	Config      Config
}

// Triggers of a report.
const (
	TriggerHourly   = "hourly"
	TriggerOnDemand = "on_demand"
)

// Every is how often the worker reconciles (SPEC Limits: hourly), and
// GasEvery how often it checks the hot wallet's gas. HistoryRetention is
// how long stored reports are kept (the hourly run prunes older ones,
// except those an episode names).
const (
	Every            = time.Hour
	GasEvery         = 15 * time.Minute
	HistoryRetention = 90 * 24 * time.Hour
)

// Alert types.
const (
	AlertInsolvent    = "reconciliation.insolvent"
	AlertInconsistent = "reconciliation.inconsistent"
	AlertGasLow       = "tron.gas_low"
)

// Episode kinds.
const (
	KindInsolvency    = "insolvency"
	KindInconsistency = "inconsistency"
	KindGasLow        = "gas_low"
)

// haltingKinds are the episode kinds that halt an asset's withdrawals.
var haltingKinds = []string{KindInconsistency, KindInsolvency}

// CustodyLine is one asset's custody against the ledger (SPEC).
type CustodyLine struct {
	Asset          string `json:"asset"`
	LedgerCustody  string `json:"ledger_custody"`
	LedgerInFlight string `json:"ledger_in_flight"`
	// LedgerTransfer is the transfer account: sent to the pair's other
	// custody less received (ledger.BookTransfer), which still backs this
	// asset's users.
	LedgerTransfer    string  `json:"ledger_transfer"`
	UserObligations   string  `json:"user_obligations"`
	ChainBalance      *string `json:"chain_balance"`
	ChainSource       string  `json:"chain_source"`
	ExpectedShortfall string  `json:"expected_shortfall"`
	Difference        *string `json:"difference"`
	// Shortfall is (user_obligations - expected_shortfall) -
	// chain_balance: positive is what the chain lacks to cover what users
	// are owed (insolvent), zero or negative the margin; null when
	// chain_balance is.
	Shortfall *string `json:"shortfall"`
	Insolvent bool    `json:"insolvent"`
	// AcknowledgedShortfall is the shortfall an operator's acknowledgement
	// of the open insolvency episode accepted; null when none is
	// acknowledged. A larger Shortfall halts the asset again.
	AcknowledgedShortfall *string `json:"acknowledged_shortfall"`
	// Inconsistent: the ledger check has LedgerFindings findings of the
	// asset, or of no asset that can be told (those count for every
	// asset). AcknowledgedFindings is how many an operator's
	// acknowledgement of the open inconsistency episode accepted; more
	// halt the asset again.
	Inconsistent         bool   `json:"inconsistent"`
	LedgerFindings       int64  `json:"ledger_findings"`
	AcknowledgedFindings *int64 `json:"acknowledged_findings"`
	// The asset's latest proof of liabilities; null before the first.
	LiabilitiesRoot       *string `json:"liabilities_root"`
	LiabilitiesTotal      *string `json:"liabilities_total"`
	LiabilitiesSnapshotAt *string `json:"liabilities_snapshot_at"`
	LiabilitiesSnapshotID *int64  `json:"liabilities_snapshot_id"`
}

// Report is the reconciliation report (SPEC), with when it was made.
type Report struct {
	Healthy                     bool          `json:"healthy"`
	LedgerConsistent            bool          `json:"ledger_consistent"`
	MaterializedVsDerivedDrifts []string      `json:"materialized_vs_derived_drifts"`
	UnbalancedEntries           []string      `json:"unbalanced_entries"`
	Alerts                      []string      `json:"alerts"`
	Custody                     []CustodyLine `json:"custody"`
	GeneratedAt                 string        `json:"generated_at"`
	// LedgerCheck is what the ledger check read: incremental (what was
	// committed since the last consistent check, and the accounts written
	// since) unless a full check was asked for, was due (RunHourly), or
	// none was recorded before.
	LedgerCheck ledger.Coverage `json:"ledger_check"`
}

// Stored is a report of the history.
type Stored struct {
	bun.BaseModel `bun:"table:reconciliation_reports"`

	ID        int64     `bun:"id,pk,autoincrement" json:"id"`
	CreatedAt time.Time `bun:"created_at" json:"created_at"`
	Trigger   string    `bun:"trigger" json:"trigger"`
	Healthy   bool      `bun:"healthy" json:"healthy"`
	Report    Report    `bun:"report,type:jsonb" json:"report"`
}

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

func (s *Service) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

// balance is what one source said about one asset.
type balance struct {
	units  *int64
	source string
	err    error
}

// Run computes a report, stores it, and opens and ends the insolvency
// episodes it shows. The hourly job and the on-demand reads both run it.
//
// Reports and acknowledgements are applied one at a time (an advisory
// lock), and a report computed before one already stored is kept in the
// history but changes no episode: two reports computed at once (the hourly
// job and an operator's) can never leave an episode open without its halt
// or lift a halt on stale figures.
//
// The ledger check is incremental (ledger.CheckIncremental); RunFull
// checks the whole ledger.
func (s *Service) Run(ctx context.Context, trigger string) (Report, error) {
	return s.run(ctx, trigger, false)
}

// RunFull is Run with the full ledger check (ledger.Check): every posting
// read again, for an operator who wants the whole ledger checked now.
func (s *Service) RunFull(ctx context.Context, trigger string) (Report, error) {
	return s.run(ctx, trigger, true)
}

// RunHourly is the hourly job's Run: with the full ledger check when the
// last stored report with one (hourly, or an operator's --full) is older
// than Config.FullCheckEvery, or there is none, so that a change made
// below a check's boundary, which the incremental check does not read, is
// found without an operator asking. The reports' own times are the
// service's clock.
func (s *Service) RunHourly(ctx context.Context) (Report, error) {
	full := false
	if every := s.Config.FullCheckEvery; every > 0 {
		var last sql.NullTime
		if err := s.DB.QueryRowContext(ctx, `SELECT max(created_at) FROM reconciliation_reports
 WHERE report -> 'ledger_check' ->> 'scope' = 'full'`).Scan(&last); err != nil {
			return Report{}, fmt.Errorf("read the last full ledger check: %w", err)
		}
		full = !last.Valid || s.now().Sub(last.Time) >= every
	}
	return s.run(ctx, TriggerHourly, full)
}

func (s *Service) run(ctx context.Context, trigger string, full bool) (Report, error) {
	started := s.now()
	var snapErr error
	if trigger == TriggerHourly && s.Liabilities != nil {
		if _, snapErr = s.Liabilities.Snapshot(ctx, liabilities.TriggerHourly, ""); snapErr != nil {
			s.log().ErrorContext(ctx, "reconciliation: the proof of liabilities failed", "error", snapErr)
		}
	}
	rep, figures, err := s.compute(ctx, snapErr, full)
	if err != nil {
		return Report{}, err
	}
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := lockEpisodes(ctx, tx); err != nil {
			return err
		}
		newer, err := tx.NewSelect().Model((*Stored)(nil)).Where("created_at > ?", started).Exists(ctx)
		if err != nil {
			return fmt.Errorf("read the reconciliation history: %w", err)
		}
		st := Stored{CreatedAt: started, Trigger: trigger, Healthy: rep.Healthy, Report: rep}
		if _, err := tx.NewInsert().Model(&st).Returning("id").Exec(ctx); err != nil {
			return fmt.Errorf("store the reconciliation report: %w", err)
		}
		if trigger == TriggerHourly {
			// The history keeps HistoryRetention, and every report an
			// episode names.
			if _, err := tx.NewDelete().Model((*Stored)(nil)).Where("created_at < ?", started.Add(-HistoryRetention)).
				Where("id NOT IN (SELECT report_id FROM reconciliation_episodes WHERE report_id IS NOT NULL)").Exec(ctx); err != nil {
				return fmt.Errorf("prune the reconciliation history: %w", err)
			}
		}
		if newer {
			s.log().InfoContext(ctx, "reconciliation: a newer report was stored meanwhile; this one changes no episode", "report_id", st.ID)
			return nil
		}
		return s.episodes(ctx, tx, st.ID, rep, figures)
	})
	if err != nil {
		return Report{}, err
	}
	return rep, nil
}

// Compute makes the report: the balance sources first, in parallel and
// outside any transaction, then the ledger check (incremental) and its
// totals from one snapshot and, at the same time, the deposits' credit
// check.
func (s *Service) Compute(ctx context.Context) (Report, error) {
	rep, _, err := s.compute(ctx, nil, false)
	return rep, err
}

// ComputeFull is Compute with the full ledger check.
func (s *Service) ComputeFull(ctx context.Context) (Report, error) {
	rep, _, err := s.compute(ctx, nil, true)
	return rep, err
}

// compute is Compute, with the error of the liabilities snapshot the run
// took (an alert), and the full ledger check when full is set. It returns
// each custody line's figures in units too, for the episodes.
func (s *Service) compute(ctx context.Context, snapErr error, full bool) (Report, map[string]facts, error) {
	assets, err := (&asset.Store{DB: s.DB}).All(ctx)
	if err != nil {
		return Report{}, nil, err
	}
	chainOf := s.readSources(ctx, assets)
	// The deposits' credit check reads in a snapshot of its own, as it
	// always has; it runs beside the ledger check, on a second connection,
	// so that the report takes about the longer of the two rather than
	// their sum (docs/performance.md).
	var (
		credits    []string
		creditsErr error
		wg         sync.WaitGroup
	)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.Credits != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			credits, creditsErr = s.Credits(cctx, s.DB)
		}()
	}
	var lr ledger.Report
	if full {
		lr, err = ledger.Check(ctx, s.DB, s.Checks...)
	} else {
		lr, err = ledger.CheckIncremental(ctx, s.DB, s.Checks...)
	}
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err != nil {
		return Report{}, nil, err
	}
	if creditsErr != nil {
		return Report{}, nil, creditsErr
	}
	rep := Report{LedgerConsistent: lr.LedgerConsistent, MaterializedVsDerivedDrifts: nonNil(lr.MaterializedVsDerivedDrifts),
		UnbalancedEntries: nonNil(lr.UnbalancedEntries), Alerts: []string{}, Custody: []CustodyLine{},
		GeneratedAt: timefmt.Format(s.now()), LedgerCheck: lr.Coverage}
	add := func(format string, args ...any) { rep.Alerts = append(rep.Alerts, fmt.Sprintf(format, args...)) }
	if n := len(lr.MaterializedVsDerivedDrifts); n > 0 {
		add("ledger: %d user balances differ from the sum of their postings (materialized_vs_derived_drifts)", n)
	}
	if n := len(lr.UnbalancedEntries); n > 0 {
		add("ledger: %d entries or postings do not balance or post to a missing account (unbalanced_entries)", n)
	}
	for _, f := range lr.NegativeBalances {
		add("ledger: negative balance: %s", f)
	}
	for _, f := range lr.HoldMismatches {
		add("holds: %s", f)
	}
	for _, f := range credits {
		add("deposits: %s", f)
	}
	if snapErr != nil {
		add("liabilities: the snapshot failed: %v", snapErr)
	}
	published := map[string]liabilities.Published{}
	if s.Liabilities != nil {
		latest, err := s.Liabilities.Latest(ctx)
		if err != nil {
			return Report{}, nil, err
		}
		for _, p := range latest {
			published[p.Asset] = p
		}
	}
	if err := s.checkLiabilities(ctx, assets, published, &rep); err != nil {
		return Report{}, nil, err
	}
	totals := map[string]ledger.Totals{}
	for _, t := range lr.Totals {
		totals[t.Asset] = t
	}
	leaving := map[string]int64{}
	if s.Leaving != nil {
		if leaving, err = s.Leaving(ctx, s.DB); err != nil {
			return Report{}, nil, err
		}
	}
	// The findings of the ledger check by asset: those whose asset cannot
	// be told count for every asset (and all of them do, should an
	// inconsistent check have counted none).
	byAsset, anyAsset := lr.ByAsset, lr.ByAsset[""]
	if !lr.LedgerConsistent {
		var counted int64
		for _, n := range byAsset {
			counted += n
		}
		if counted == 0 {
			anyAsset = 1
		}
	}
	acked, err := s.acknowledged(ctx, s.DB)
	if err != nil {
		return Report{}, nil, err
	}
	figures := map[string]facts{}
	insolvent := false
	for _, a := range assets {
		t, seen := totals[a.Code]
		findings := byAsset[a.Code] + anyAsset
		if !a.Enabled && !seen && byAsset[a.Code] == 0 {
			continue
		}
		b := chainOf[a.Code]
		owed, shortfall := t.UserObligations()+t.Suspense, t.InFlight+leaving[a.Code]
		line := CustodyLine{Asset: a.Code, LedgerCustody: a.Format(t.Custody), LedgerInFlight: a.Format(t.InFlight),
			LedgerTransfer: a.Format(t.Transfer), UserObligations: a.Format(owed), ChainSource: b.source, ExpectedShortfall: a.Format(shortfall),
			Inconsistent: findings > 0, LedgerFindings: findings}
		f := facts{findings: findings}
		for _, ep := range acked {
			if ep.Asset != a.Code {
				continue
			}
			switch {
			case ep.Kind == KindInsolvency && ep.AckedShortfall != nil:
				line.AcknowledgedShortfall = ptr(a.Format(*ep.AckedShortfall))
			case ep.Kind == KindInconsistency:
				line.AcknowledgedFindings = ep.AckedFindings
			}
		}
		if findings > 0 {
			add("%s: the ledger is inconsistent: %d findings of the ledger check concern it (listed above)", a.Code, findings)
		}
		if b.units != nil {
			// What a booked transfer moved to the pair's other custody
			// (BTC to BTC_LN: a channel opened) still backs these users,
			// and what it brought from there backs the other asset's.
			short := owed - shortfall - (*b.units + t.Transfer)
			f.shortfall = &short
			line.ChainBalance, line.Difference, line.Shortfall = ptr(a.Format(*b.units)), ptr(a.Format(*b.units-t.Custody)), ptr(a.Format(short))
			if short > 0 {
				line.Insolvent, insolvent = true, true
				add("%s: insolvent: the chain holds %s%s, less than the %s owed to users minus the %s expected to be leaving (in flight, or handed to the processor)",
					a.Code, a.Format(*b.units), transferText(a, t.Transfer), a.Format(owed), a.Format(shortfall))
			} else if *b.units < t.Custody {
				add("%s: the chain holds %s less than the ledger's custody (still covering what users are owed)", a.Code, a.Format(t.Custody-*b.units))
			}
		} else {
			add("%s: chain balance unknown: %s: %v", a.Code, b.source, b.err)
		}
		if p, ok := published[a.Code]; ok {
			v := liabilities.View(p, a)
			line.LiabilitiesRoot, line.LiabilitiesTotal, line.LiabilitiesSnapshotAt, line.LiabilitiesSnapshotID = &v.Root, &v.Total, &v.SnapshotAt, &v.SnapshotID
		}
		rep.Custody = append(rep.Custody, line)
		figures[a.Code] = f
	}
	gas, err := s.openEpisodes(ctx, s.DB, KindGasLow)
	if err != nil {
		return Report{}, nil, err
	}
	for _, g := range gas {
		add("gas: %s", g.Detail)
	}
	rep.Healthy = rep.LedgerConsistent && !insolvent && len(rep.Alerts) == 0
	return rep, figures, nil
}

// transferText says what a booked transfer adds to (or takes from) the
// chain's backing of an asset, "" without one.
func transferText(a asset.Asset, transfer int64) string {
	switch {
	case transfer > 0:
		return fmt.Sprintf(" and %s moved to the other custody of the coin", a.Format(transfer))
	case transfer < 0:
		return fmt.Sprintf(", of which %s came from the other custody of the coin", a.Format(-transfer))
	}
	return ""
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// readSources reads every enabled asset's balance source in parallel.
func (s *Service) readSources(ctx context.Context, assets []asset.Asset) map[string]balance {
	timeout := s.Config.SourceTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	out := map[string]balance{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range assets {
		var read func(ctx context.Context) (int64, error)
		var source string
		switch a.Code {
		case asset.BTC:
			source = "the processor's on-chain wallet (BTC-CHAIN balance, confirmed and unconfirmed)"
			if s.Wallet != nil {
				read = func(ctx context.Context) (int64, error) {
					o, err := s.Wallet.WalletOverview(ctx)
					if err != nil {
						return 0, err
					}
					return o.Balance.Units(8)
				}
			}
		case asset.BTCLN:
			source = "the processor's Lightning node (local balance of its channels)"
			if s.Wallet != nil {
				read = func(ctx context.Context) (int64, error) {
					b, err := s.Wallet.LightningBalance(ctx)
					if err != nil {
						return 0, err
					}
					if !b.HasChannels() {
						return 0, errors.New("the Lightning node's answer has no channel balance")
					}
					return b.LocalMsat() / 1000, nil
				}
			}
		case asset.USDTTRC20:
			source = fmt.Sprintf("TronGrid: USDT balance of %d addresses (the processor's pool and the hot wallet)", len(s.Config.USDTAddresses))
			if s.Tron != nil && len(s.Config.USDTAddresses) > 0 {
				read = s.usdtBalance
			}
		default:
			source = "no source for this asset"
		}
		if read == nil {
			mu.Lock() // the goroutines of the assets before this one write too
			out[a.Code] = balance{source: source, err: errors.New("not configured")}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			units, err := read(rctx)
			b := balance{source: source, err: err}
			if err == nil {
				b.units = &units
			} else {
				s.log().WarnContext(ctx, "reconciliation: balance source unreadable", "asset", a.Code, "error", err)
			}
			mu.Lock()
			out[a.Code] = b
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// usdtBalance sums the USDT of the custody addresses, eight at a time.
func (s *Service) usdtBalance(ctx context.Context) (int64, error) {
	addrs := slices.Clone(s.Config.USDTAddresses)
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	var (
		mu    sync.Mutex
		total int64
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for _, raw := range addrs {
		addr, err := chain.ParseTronAddress(raw)
		if err != nil {
			return 0, fmt.Errorf("custody address %q: %w", raw, err)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			units, err := s.Tron.USDTBalance(ctx, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("%s: %w", addr, err)
			}
			total += units
		}()
	}
	wg.Wait()
	return total, first
}

// episodes applies a report to the episodes of each of its custody lines:
// an insolvency episode follows the line's shortfall (a line whose source
// could not be read leaves it as it is), an inconsistency episode its
// ledger findings; then the asset's halt follows its open episodes.
func (s *Service) episodes(ctx context.Context, tx bun.Tx, reportID int64, rep Report, figures map[string]facts) error {
	for _, line := range rep.Custody {
		f := figures[line.Asset]
		if f.shortfall != nil {
			detail := fmt.Sprintf("%s is insolvent: the chain holds %s, users are owed %s, %s is expected to be leaving (in flight, or handed to the processor): a shortfall of %s (report %d)",
				line.Asset, deref(line.ChainBalance), line.UserObligations, line.ExpectedShortfall, deref(line.Shortfall), reportID)
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

// Ack records that the operator looked at the open insolvency and
// inconsistency episodes (of one asset, or all when code is ""): their
// halts are lifted at once, and each records what it accepts, the
// shortfall (insolvency) or the number of findings (inconsistency) of the
// latest report applied to it. The episodes stay open without halting
// until a clean report ends them, or a report finds more than was
// accepted, which opens a new episode (a new halt, a new alert). It
// returns the episodes it acknowledged.
func (s *Service) Ack(ctx context.Context, actor audit.Actor, code, note string) ([]Episode, error) {
	if !actor.Valid() {
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
		_, err := audit.Record(ctx, tx, s.now(), actor, audit.ReconciliationAck, strings.Join(codes, ","),
			map[string]any{"assets": codes, "note": note, "accepted": accepted})
		return err
	})
	return acked, err
}

// History returns the last stored reports, newest first.
func (s *Service) History(ctx context.Context, limit int) ([]Stored, error) {
	var out []Stored
	if err := s.DB.NewSelect().Model(&out).OrderExpr("created_at DESC, id DESC").Limit(int64(limit)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read reconciliation history: %w", err)
	}
	return out, nil
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

// CheckGas reads the hot wallet's TRX and opens a gas_low episode, with
// one alert, when it is below the threshold, or ends the open one when it
// is not.
func (s *Service) CheckGas(ctx context.Context) error {
	if s.Tron == nil || s.Config.HotWallet == "" {
		return nil
	}
	addr, err := chain.ParseTronAddress(s.Config.HotWallet)
	if err != nil {
		return fmt.Errorf("TRON_HOT_WALLET: %w", err)
	}
	timeout := s.Config.SourceTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	sun, err := s.Tron.TRXBalance(rctx, addr)
	cancel()
	if err != nil {
		return fmt.Errorf("read the hot wallet's TRX: %w", err)
	}
	now := s.now()
	trx := trxOf(sun)
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if sun >= s.Config.TRXAlertThreshold {
			_, err := tx.NewUpdate().Model((*Episode)(nil)).Set("ended_at = ?", now).
				Where("kind = ? AND ended_at IS NULL", KindGasLow).Exec(ctx)
			return err
		}
		detail := fmt.Sprintf("the hot wallet %s has %s TRX, below TRX_ALERT_THRESHOLD (%s TRX): USDT withdrawals cannot pay their gas; top it up",
			addr, trx, trxOf(s.Config.TRXAlertThreshold))
		ep := Episode{Kind: KindGasLow, Asset: "TRX", StartedAt: now, Detail: detail}
		err := tx.NewInsert().Model(&ep).ExcludeColumn("id").On("CONFLICT (kind, asset) WHERE ended_at IS NULL DO NOTHING").
			Returning("id").Scan(ctx)
		if db.IsNoRows(err) || (err == nil && s.Alerts == nil) {
			return nil // an episode is open already
		}
		if err != nil {
			return fmt.Errorf("open the gas episode: %w", err)
		}
		_, _, err = s.Alerts.Raise(ctx, tx, alert.Params{Type: AlertGasLow, Subject: fmt.Sprintf("TRX:episode-%d", ep.ID), Detail: detail})
		return err
	})
}

// trxOf renders sun as TRX without trailing zeros ("150", "0.5").
func trxOf(sun int64) string {
	t := money.Format(sun, 6)
	if strings.Contains(t, ".") {
		t = strings.TrimRight(strings.TrimRight(t, "0"), ".")
	}
	return t
}
