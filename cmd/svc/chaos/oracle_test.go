package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"svc/modules/deposit"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/money"
)

// violations collects broken invariants; a run passes with none.
type violations struct {
	mu   sync.Mutex
	list []string
	seen map[string]bool
}

func (v *violations) add(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string]bool{}
	}
	if v.seen[s] {
		return
	}
	v.seen[s] = true
	v.list = append(v.list, time.Now().Format("15:04:05.000")+" "+s)
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.list...)
}

// oracle checks the invariants against the database and the simulators.
type oracle struct {
	c      *cluster
	v      *violations
	checks int
	// strays are the deposits and withdrawals in the database that no
	// answer named (idempotency), extraPayouts the processor payouts
	// beyond a withdrawal's first (payouts), as last counted.
	strays, extraPayouts int
	mu                   sync.Mutex
}

// books checks the ledger (balanced entries, materialized balances equal
// their postings, nothing negative, holds equal the gross of open
// withdrawals), each confirmed payment credited exactly once or in review,
// and at most one processor payout per withdrawal. A database that cannot
// be read (restarting) skips the round: it returns false.
func (o *oracle) books(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := ledger.Check(ctx, o.c.db.Bun, withdrawal.CheckHolds)
	if err != nil {
		return false
	}
	if !r.LedgerConsistent {
		o.v.add("ledger check: drifts %v; unbalanced %v; negative %v; holds %v",
			r.MaterializedVsDerivedDrifts, r.UnbalancedEntries, r.NegativeBalances, r.HoldMismatches)
	}
	credits, err := deposit.CheckCredits(ctx, o.c.db.Bun)
	if err != nil {
		return false
	}
	for _, s := range credits {
		o.v.add("deposit credits: %s", s)
	}
	o.payouts()
	o.mu.Lock()
	o.checks++
	o.mu.Unlock()
	return true
}

// payouts: at most one processor payout per withdrawal, ever.
func (o *oracle) payouts() {
	per := map[string][]string{}
	for _, p := range o.c.sim.Payouts() {
		per[p.WithdrawalID] = append(per[p.WithdrawalID], p.ID+" "+p.State)
	}
	extra := 0
	for id, list := range per {
		if id == "" {
			o.v.add("processor payouts without a withdrawal id: %v", list)
		} else if len(list) > 1 {
			o.v.add("withdrawal %s has %d processor payouts: %v", id, len(list), list)
			extra += len(list) - 1
		}
	}
	o.mu.Lock()
	o.extraPayouts = extra
	o.mu.Unlock()
}

// watch runs books every interval until ctx ends.
func (o *oracle) watch(ctx context.Context, every time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
			o.books(ctx)
		}
	}
}

// unsettled lists what still needs something to happen: deposits and
// withdrawals not yet in a state that needs no engineer, and events not yet
// delivered. Deposits: settled, expired, dismissed and failed are final;
// review waits for an operator with its reason. Withdrawals: confirmed and
// refunded are final; pending_approval (with its reason) and failed (with
// its failure_reason) wait for an operator.
func (o *oracle) unsettled(ctx context.Context) ([]string, error) {
	var out []string
	var deps []struct {
		ID     uuid.UUID
		Status string
		Review *string
	}
	if err := o.c.db.Bun.NewSelect().Table("deposits").Column("id", "status").ColumnExpr("review_reason AS review").
		Where("status NOT IN ('settled', 'expired', 'dismissed', 'failed')").Scan(ctx, &deps); err != nil {
		return nil, err
	}
	for _, d := range deps {
		if d.Status == "review" && d.Review != nil && *d.Review != "" {
			continue
		}
		out = append(out, fmt.Sprintf("deposit %s is %s", d.ID, d.Status))
	}
	var wds []struct {
		ID             uuid.UUID
		Status         string
		ApprovalReason *string
		FailureReason  *string
	}
	if err := o.c.db.Bun.NewSelect().Table("withdrawals").Column("id", "status", "approval_reason", "failure_reason").
		Where("status NOT IN ('confirmed', 'refunded')").Scan(ctx, &wds); err != nil {
		return nil, err
	}
	for _, w := range wds {
		switch {
		case w.Status == "pending_approval" && w.ApprovalReason != nil && *w.ApprovalReason != "":
		case w.Status == "failed" && w.FailureReason != nil && *w.FailureReason != "":
		default:
			out = append(out, fmt.Sprintf("withdrawal %s is %s", w.ID, w.Status))
		}
	}
	var pending []struct {
		ID     uuid.UUID
		Type   string
		Status string
	}
	if err := o.c.db.Bun.NewSelect().Table("outbound_events").Column("id", "type", "status").
		Where("status <> 'delivered'").Scan(ctx, &pending); err != nil {
		return nil, err
	}
	for _, e := range pending {
		out = append(out, fmt.Sprintf("event %s (%s) is %s", event.PublicID(e.ID), e.Type, e.Status))
	}
	sort.Strings(out)
	return out, nil
}

// settledChecks runs the checks of a settled run that read everything once
// (events, processor payments, idempotency), adds what they find to v and
// returns the number of events delivered.
func (o *oracle) settledChecks(ctx context.Context, d *driver, v *violations) int {
	nEvents, err := o.events(ctx)
	if err != nil {
		v.add("events: %v", err)
	}
	if err := o.processorPayments(ctx); err != nil {
		v.add("processor payments: %v", err)
	}
	if err := o.idempotency(ctx, d); err != nil {
		v.add("idempotency: %v", err)
	}
	return nEvents
}

// events: every event the database holds was delivered to the receiver,
// with a valid signature, and the receiver got nothing else (no event of
// a rolled-back change).
func (o *oracle) events(ctx context.Context) (int, error) {
	var rows []struct {
		ID   uuid.UUID
		Type string
	}
	if err := o.c.db.Bun.NewSelect().Table("outbound_events").Column("id", "type").Scan(ctx, &rows); err != nil {
		return 0, err
	}
	got := map[string]string{}
	for _, e := range o.c.recv.Events() {
		got[e.ID] = e.Type
	}
	want := map[string]bool{}
	for _, e := range rows {
		id := event.PublicID(e.ID)
		want[id] = true
		switch typ, ok := got[id]; {
		case !ok:
			o.v.add("event %s (%s) was never delivered", id, e.Type)
		case typ != e.Type:
			o.v.add("event %s delivered as %s, stored as %s", id, typ, e.Type)
		}
	}
	for id, typ := range got {
		if !want[id] {
			o.v.add("the receiver got event %s (%s), which the database does not hold", id, typ)
		}
	}
	if n := o.c.recv.badSig.Load(); n > 0 {
		o.v.add("%d deliveries had a signature the receiver could not verify", n)
	}
	return len(rows), nil
}

// idempotency: every deposit and withdrawal in the database is one the
// driver was told about (each key one effect; an answer never lost for
// good).
func (o *oracle) idempotency(ctx context.Context, d *driver) error {
	known := map[string]bool{}
	d.mu.Lock()
	for _, x := range d.deposits {
		known[x.id] = true
	}
	for _, w := range d.wds {
		known[w.id] = true
	}
	nd, nw := len(d.deposits), len(d.wds)
	d.mu.Unlock()
	strays := 0
	defer func() {
		o.mu.Lock()
		o.strays = strays
		o.mu.Unlock()
	}()
	for _, table := range []string{"deposits", "withdrawals"} {
		var ids []uuid.UUID
		if err := o.c.db.Bun.NewSelect().Table(table).Column("id").Scan(ctx, &ids); err != nil {
			return err
		}
		for _, id := range ids {
			if !known[id.String()] {
				o.v.add("%s %s exists but no request was answered with it", strings.TrimSuffix(table, "s"), id)
				strays++
			}
		}
		n := nd
		if table == "withdrawals" {
			n = nw
		}
		if len(ids) != n {
			o.v.add("%s: %d in the database, %d answered to the driver", table, len(ids), n)
		}
	}
	return nil
}

// processorPayments: every payment the processor settled, on any invoice
// of a deposit, is known to the service and credited once, or its deposit
// is waiting for an operator (review) or was closed by one (dismissed); and
// a credited payment is worth what the processor says it was.
func (o *oracle) processorPayments(ctx context.Context) error {
	var rows []struct {
		PaymentID string
		Units     *int64
		Credited  bool
		Status    string
	}
	if err := o.c.db.Bun.NewSelect().TableExpr("deposit_payments AS dp").Join("JOIN deposits AS d ON d.id = dp.deposit_id").
		ColumnExpr("dp.payment_id, dp.units, dp.credited, d.status").Scan(ctx, &rows); err != nil {
		return err
	}
	known := make(map[string]int, len(rows))
	for i, r := range rows {
		known[r.PaymentID] = i
	}
	for _, inv := range o.c.sim.Invoices() {
		for _, p := range inv.Payments {
			if p.Status != "Settled" {
				continue
			}
			i, ok := known[p.ID]
			if !ok {
				o.v.add("payment %s of invoice %s (%s %s) was settled by the processor and the service does not know it", p.ID, inv.ID, p.Amount, p.Method)
				continue
			}
			r := rows[i]
			switch {
			case r.Credited:
				if want, err := money.ParseDecimal(p.Amount, scale(p.Method)); err == nil && (r.Units == nil || *r.Units != want) {
					o.v.add("payment %s credited %v units, the processor says %s", p.ID, r.Units, p.Amount)
				}
			case r.Status == "review" || r.Status == "dismissed":
			default:
				o.v.add("payment %s was settled by the processor; its deposit is %s and it is not credited", p.ID, r.Status)
			}
		}
	}
	return nil
}
