// Package reconcile owns the ledger and custody reconciliation: the report
// of the SPEC (the ledger check, then per asset what the ledger says is in
// custody and owed against what the processor's wallets and the TRON chain
// hold), its history, the insolvency episodes it opens and closes (an
// insolvent asset halts its withdrawals until a clean report or an
// operator's acknowledgement), and the hot wallet's gas check.
//
// # The custody line
//
// For each asset, in smallest units:
//
//	ledger_custody     the custody account: what the wallets should hold
//	ledger_in_flight   payouts broadcast and not yet confirmed
//	user_obligations   users' available + held (+ the suspense account,
//	                   which no flow posts to today: money in the deposit
//	                   review queue is in no account until it is credited)
//	chain_balance      what the source reports; null when it cannot be read
//	expected_shortfall ledger_in_flight plus the gross of withdrawals that
//	                   may have left the wallet before the ledger recorded a
//	                   broadcast (withdrawal.LeavingCustody)
//	difference         chain_balance - ledger_custody (negative is bad)
//	insolvent          chain_balance < user_obligations - expected_shortfall
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
// An insolvent asset opens an insolvency episode (one at a time per
// asset), which sets assets.withdrawals_halted_since: new withdrawals of
// the asset wait for an operator with reason insolvency, the submitter
// hands nothing of it to the processor, and /readyz's reconciliation
// component is degraded. One operator alert per episode. A later report
// that finds the asset solvent ends the episode; an operator who has
// looked acknowledges it (svc admin reconciliation ack), which lifts the
// halt at once, and no new episode opens for the asset until a clean
// report ended that one. A source that cannot be read changes nothing.
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
	AlertInsolvent = "reconciliation.insolvent"
	AlertGasLow    = "tron.gas_low"
)

// Episode kinds.
const (
	KindInsolvency = "insolvency"
	KindGasLow     = "gas_low"
)

// CustodyLine is one asset's custody against the ledger (SPEC).
type CustodyLine struct {
	Asset             string  `json:"asset"`
	LedgerCustody     string  `json:"ledger_custody"`
	LedgerInFlight    string  `json:"ledger_in_flight"`
	UserObligations   string  `json:"user_obligations"`
	ChainBalance      *string `json:"chain_balance"`
	ChainSource       string  `json:"chain_source"`
	ExpectedShortfall string  `json:"expected_shortfall"`
	Difference        *string `json:"difference"`
	Insolvent         bool    `json:"insolvent"`
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
	rep, err := s.compute(ctx, snapErr, full)
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
		return s.episodes(ctx, tx, st.ID, rep)
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
func (s *Service) Compute(ctx context.Context) (Report, error) { return s.compute(ctx, nil, false) }

// ComputeFull is Compute with the full ledger check.
func (s *Service) ComputeFull(ctx context.Context) (Report, error) { return s.compute(ctx, nil, true) }

// compute is Compute, with the error of the liabilities snapshot the run
// took (an alert), and the full ledger check when full is set.
func (s *Service) compute(ctx context.Context, snapErr error, full bool) (Report, error) {
	assets, err := (&asset.Store{DB: s.DB}).All(ctx)
	if err != nil {
		return Report{}, err
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
		return Report{}, err
	}
	if creditsErr != nil {
		return Report{}, creditsErr
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
			return Report{}, err
		}
		for _, p := range latest {
			published[p.Asset] = p
		}
	}
	if err := s.checkLiabilities(ctx, assets, published, &rep); err != nil {
		return Report{}, err
	}
	totals := map[string]ledger.Totals{}
	for _, t := range lr.Totals {
		totals[t.Asset] = t
	}
	leaving := map[string]int64{}
	if s.Leaving != nil {
		if leaving, err = s.Leaving(ctx, s.DB); err != nil {
			return Report{}, err
		}
	}
	insolvent := false
	for _, a := range assets {
		t, seen := totals[a.Code]
		if !a.Enabled && !seen {
			continue
		}
		b := chainOf[a.Code]
		owed, shortfall := t.UserObligations()+t.Suspense, t.InFlight+leaving[a.Code]
		line := CustodyLine{Asset: a.Code, LedgerCustody: a.Format(t.Custody), LedgerInFlight: a.Format(t.InFlight),
			UserObligations: a.Format(owed), ChainSource: b.source, ExpectedShortfall: a.Format(shortfall)}
		if b.units != nil {
			line.ChainBalance, line.Difference = ptr(a.Format(*b.units)), ptr(a.Format(*b.units-t.Custody))
			if *b.units < owed-shortfall {
				line.Insolvent, insolvent = true, true
				add("%s: insolvent: the chain holds %s, less than the %s owed to users minus the %s expected to be leaving (in flight, or handed to the processor)",
					a.Code, a.Format(*b.units), a.Format(owed), a.Format(shortfall))
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
	}
	gas, err := s.openEpisodes(ctx, s.DB, KindGasLow)
	if err != nil {
		return Report{}, err
	}
	for _, g := range gas {
		add("gas: %s", g.Detail)
	}
	rep.Healthy = rep.LedgerConsistent && !insolvent && len(rep.Alerts) == 0
	return rep, nil
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

// episodes opens an insolvency episode for each insolvent asset that has
// none, and ends the open ones of assets found solvent; an asset whose
// source could not be read is left as it is.
func (s *Service) episodes(ctx context.Context, tx bun.Tx, reportID int64, rep Report) error {
	now := s.now()
	for _, line := range rep.Custody {
		if line.ChainBalance == nil {
			continue
		}
		if !line.Insolvent {
			var ended []Episode
			if err := tx.NewUpdate().Model(&ended).Set("ended_at = ?", now).
				Where("kind = ? AND asset = ? AND ended_at IS NULL", KindInsolvency, line.Asset).Returning("*").Scan(ctx); err != nil && !db.IsNoRows(err) {
				return fmt.Errorf("end the insolvency of %s: %w", line.Asset, err)
			}
			if len(ended) > 0 {
				s.log().InfoContext(ctx, "reconciliation: insolvency ended", "asset", line.Asset, "report_id", reportID)
			}
			if err := setHalt(ctx, tx, line.Asset, nil); err != nil {
				return err
			}
			continue
		}
		detail := fmt.Sprintf("%s is insolvent: the chain holds %s, users are owed %s, %s is in flight (report %d)",
			line.Asset, *line.ChainBalance, line.UserObligations, line.LedgerInFlight, reportID)
		ep := Episode{Kind: KindInsolvency, Asset: line.Asset, StartedAt: now, Detail: detail, ReportID: &reportID}
		res, err := tx.NewInsert().Model(&ep).ExcludeColumn("id").On("CONFLICT (kind, asset) WHERE ended_at IS NULL DO NOTHING").Exec(ctx)
		if err != nil {
			return fmt.Errorf("open the insolvency of %s: %w", line.Asset, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			// An episode is open already: acknowledged (no halt), or halting,
			// and then its halt is (re)asserted.
			var open Episode
			if err := tx.NewSelect().Model(&open).Where("kind = ? AND asset = ? AND ended_at IS NULL", KindInsolvency, line.Asset).Scan(ctx); err != nil {
				return fmt.Errorf("read the insolvency of %s: %w", line.Asset, err)
			}
			if open.AckedAt == nil {
				if err := setHalt(ctx, tx, line.Asset, &open.StartedAt); err != nil {
					return err
				}
			}
			continue
		}
		if err := setHalt(ctx, tx, line.Asset, &now); err != nil {
			return err
		}
		if s.Alerts != nil {
			if _, _, err := s.Alerts.Raise(ctx, tx, alert.Params{Type: AlertInsolvent, Subject: fmt.Sprintf("%s:report-%d", line.Asset, reportID),
				Detail: detail + ". Withdrawals of " + line.Asset + " wait for an operator and none is submitted until a clean report or svc admin reconciliation ack."}); err != nil {
				return err
			}
		}
	}
	return nil
}

// lockEpisodes serializes the transactions that open, end or acknowledge
// episodes, until the caller's transaction ends.
func lockEpisodes(ctx context.Context, tx bun.Tx) error {
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext('svc:reconciliation_episodes'))"); err != nil {
		return fmt.Errorf("lock the reconciliation episodes: %w", err)
	}
	return nil
}

func setHalt(ctx context.Context, idb bun.IDB, code string, since *time.Time) error {
	q := idb.NewUpdate().Table("assets").Set("withdrawals_halted_since = ?", since).Where("asset = ?", code)
	if since == nil {
		q = q.Where("withdrawals_halted_since IS NOT NULL")
	} else {
		q = q.Where("withdrawals_halted_since IS NULL")
	}
	if _, err := q.Exec(ctx); err != nil {
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

// ErrNothingToAck: no open, unacknowledged insolvency episode.
var ErrNothingToAck = fault.New(fault.Conflict, "no asset is halted by an insolvency: nothing to acknowledge")

// Ack records that the operator looked at the open insolvency episodes
// (of one asset, or all when code is ""): their halts are lifted at once,
// and the episodes stay open (no new alert or halt) until a clean report
// ends them. It returns the episodes it acknowledged.
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
		q := tx.NewUpdate().Model(&acked).Set("acked_at = ?, acked_by = ?", s.now(), actor.String()).
			Where("kind = ? AND ended_at IS NULL AND acked_at IS NULL", KindInsolvency)
		if code != "" {
			q = q.Where("asset = ?", code)
		}
		if err := q.Returning("*").Scan(ctx); err != nil && !db.IsNoRows(err) {
			return fmt.Errorf("acknowledge insolvency: %w", err)
		}
		if len(acked) == 0 {
			return ErrNothingToAck
		}
		var codes []string
		for _, ep := range acked {
			codes = append(codes, ep.Asset)
			if err := setHalt(ctx, tx, ep.Asset, nil); err != nil {
				return err
			}
		}
		_, err := audit.Record(ctx, tx, s.now(), actor, audit.ReconciliationAck, strings.Join(codes, ","),
			map[string]any{"assets": codes, "note": note})
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

// Halts describes the assets whose withdrawals are halted now, for
// /readyz; nil when none is.
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
		parts = append(parts, fmt.Sprintf("%s insolvent since %s", a.Code, a.WithdrawalsHaltedSince.UTC().Format(time.RFC3339)))
	}
	return fmt.Errorf("withdrawals halted: %s (svc admin reconciliation)", strings.Join(parts, "; "))
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
