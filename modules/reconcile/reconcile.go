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
//	                   it received, as booked (ledger.BookTransfer), which
//	                   still backs this asset's users
//	user_obligations   users' available + held + reserved (escrow), and the
//	                   platform accounts' available + held + reserved,
//	                   whom the wallets back as they back the users (+ the
//	                   suspense account, which no flow posts to today:
//	                   money in the deposit review queue is in no account
//	                   until it is credited)
//	platform_obligations the platform accounts' part of user_obligations
//	chain_balance      what the source reports; null when it cannot be read
//	expected_shortfall ledger_in_flight plus the gross of withdrawals that
//	                   may have left the wallet before the ledger recorded a
//	                   broadcast (withdrawal.LeavingCustody)
//	difference         chain_balance - ledger_custody (negative is bad)
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
// root of its Merkle sum tree, the total that root commits to (users' and
// platform accounts' available + held + reserved, each a leaf), the
// snapshot's time and id; null before the first snapshot. The hourly run
// takes a new snapshot first, so its report shows the tree of that hour.
// The tree's total is those balances at its own snapshot of the ledger:
// when nothing was posted in between, it equals user_obligations less the
// suspense account.
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
	"fmt"
	"log/slog"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/modules/operator"
	"svc/platform/btcpay"
	"svc/platform/chain"
	"svc/platform/db"
	"svc/platform/logging"
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

	// Operators names what is wrong with the operators: the enrollment
	// chain that does not verify, or rows of the operators tables it does
	// not prove (operator.Service.Problems); each is a line of the report
	// and an alert. Nil skips the check.
	Operators func(ctx context.Context, idb bun.IDB) ([]string, error)
	// Signatures verifies the operator's signature of an acknowledgement
	// (Ack): lifting a halt lets withdrawals pay out again, so it is a
	// signed action (AckExpect). Nil acts unsigned.
	Signatures *operator.Service
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

// CustodyLine is one asset's custody against the ledger (SPEC).
type CustodyLine struct {
	Asset          string `json:"asset"`
	LedgerCustody  string `json:"ledger_custody"`
	LedgerInFlight string `json:"ledger_in_flight"`
	// LedgerTransfer is the transfer account: sent to the pair's other
	// custody less received (ledger.BookTransfer), which still backs this
	// asset's users.
	LedgerTransfer string `json:"ledger_transfer"`
	// UserObligations is everything the ledger owes in the asset: the
	// users' available + held + reserved, the platform accounts' balances
	// and the suspense account. PlatformObligations is the platform
	// accounts' part of it.
	UserObligations     string  `json:"user_obligations"`
	PlatformObligations string  `json:"platform_obligations"`
	ChainBalance        *string `json:"chain_balance"`
	ChainSource         string  `json:"chain_source"`
	ExpectedShortfall   string  `json:"expected_shortfall"`
	Difference          *string `json:"difference"`
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

func (s *Service) log() *slog.Logger { return logging.Or(s.Log) }

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Microsecond) }

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

// History returns the last stored reports, newest first.
func (s *Service) History(ctx context.Context, limit int) ([]Stored, error) {
	var out []Stored
	if err := s.DB.NewSelect().Model(&out).OrderExpr("created_at DESC, id DESC").Limit(int64(limit)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read reconciliation history: %w", err)
	}
	return out, nil
}
