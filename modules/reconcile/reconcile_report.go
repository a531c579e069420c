package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/platform/chain"
	"svc/platform/timefmt"
)

// balance is what one source said about one asset.
type balance struct {
	units  *int64
	source string
	err    error
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
	if err := s.checkOperators(ctx, &rep); err != nil {
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
		owed, shortfall := t.Obligations()+t.Suspense, t.InFlight+leaving[a.Code] // users and platform accounts
		line := CustodyLine{Asset: a.Code, LedgerCustody: a.Format(t.Custody), LedgerInFlight: a.Format(t.InFlight),
			LedgerTransfer: a.Format(t.Transfer), UserObligations: a.Format(owed), PlatformObligations: a.Format(t.PlatformObligations()), ChainSource: b.source, ExpectedShortfall: a.Format(shortfall),
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
				add("%s: insolvent: the chain holds %s%s, less than the %s owed to users%s minus the %s expected to be leaving (in flight, or handed to the processor)",
					a.Code, a.Format(*b.units), transferText(a, t.Transfer), a.Format(owed), platformText(a, t), a.Format(shortfall))
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

// platformText names the platform accounts' part of what is owed, when
// they hold any: " (of which 0.001 to platform accounts)".
func platformText(a asset.Asset, t ledger.Totals) string {
	if t.PlatformObligations() == 0 {
		return ""
	}
	return fmt.Sprintf(" (of which %s to platform accounts)", a.Format(t.PlatformObligations()))
}
