package withdrawal

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/db"
	"svc/platform/fault"
)

// Window is the length of the rolling caps.
const Window = 24 * time.Hour

// gates returns the reasons a withdrawal of gross waits for an operator,
// with the asset's rolling volume at total, in the order they are written.
// The per-user cap is counted after the hold: userCap is its reason when it
// fired.
func gates(a asset.Asset, gross, total int64, userCap string) []string {
	var reasons []string
	if a.Code == asset.USDTTRC20 {
		reasons = append(reasons, reasonUSDT())
	}
	if gross > a.WithdrawalAutoLimit {
		reasons = append(reasons, reasonAutoLimit(a, gross))
	}
	if total > a.WithdrawalDailyCap {
		reasons = append(reasons, reasonDailyCap(a, total))
	}
	if userCap != "" {
		reasons = append(reasons, userCap)
	}
	if a.WithdrawalsHaltedSince != nil {
		reasons = append(reasons, reasonsHalted(a)...)
	}
	return reasons
}

// ownerGates adds to a withdrawal's reasons the one every platform
// account's withdrawal has: an operator approves it, whatever the limits.
func ownerGates(platformAccount string, reasons []string) []string {
	if platformAccount == "" {
		return reasons
	}
	return append([]string{reasonPlatform(platformAccount)}, reasons...)
}

func reasonPlatform(name string) string {
	return fmt.Sprintf("platform_account: every withdrawal from a platform account (%q) is approved by an operator", name)
}

// The gates' reasons start with the name of the setting that fired, so an
// integrator can tell them apart; the rest is for people.
func reasonUSDT() string {
	return "USDT_TRC20: every USDT_TRC20 withdrawal is sent by an operator"
}

func reasonAutoLimit(a asset.Asset, gross int64) string {
	return fmt.Sprintf("withdrawal_auto_limit: %s %s is above the per-withdrawal auto-approval limit of %s %s",
		a.Format(gross), a.Code, a.Format(a.WithdrawalAutoLimit), a.Code)
}

func reasonDailyCap(a asset.Asset, total int64) string {
	return fmt.Sprintf("withdrawal_daily_cap: the rolling 24-hour total of %s withdrawals would be %s %s, above the cap of %s %s",
		a.Code, a.Format(total), a.Code, a.Format(a.WithdrawalDailyCap), a.Code)
}

func reasonUserCap(a asset.Asset, total int64) string {
	return fmt.Sprintf("withdrawal_user_daily_cap: this user's rolling 24-hour total of %s withdrawals would be %s %s, above the per-user cap of %s %s",
		a.Code, a.Format(total), a.Code, a.Format(*a.WithdrawalUserDailyCap), a.Code)
}

// reasonsHalted are the reasons of a halted asset's halt, one per kind of
// episode that halts it (modules/reconcile; a halt that names none is an
// insolvency's).
func reasonsHalted(a asset.Asset) []string {
	since := a.WithdrawalsHaltedSince.UTC().Format(time.RFC3339)
	var out []string
	for _, kind := range a.WithdrawalsHaltedBy {
		if kind == "inconsistency" {
			out = append(out, fmt.Sprintf("inconsistency: reconciliation found the %s ledger inconsistent (since %s); "+
				"%s withdrawals wait for an operator until a clean report or an operator's acknowledgement", a.Code, since, a.Code))
		}
	}
	if len(out) == 0 || slices.Contains(a.WithdrawalsHaltedBy, "insolvency") {
		out = append(out, fmt.Sprintf("insolvency: reconciliation found %s custody short of what the users are owed (since %s); "+
			"%s withdrawals wait for an operator until a clean report or an operator's acknowledgement", a.Code, since, a.Code))
	}
	return out
}

// ErrHalted: the asset's withdrawals are halted by reconciliation, and an
// operator decision that would let money out (approve, mark-broadcast)
// waits for a clean report or an acknowledgement.
var ErrHalted = fault.New(fault.Conflict, "the asset's withdrawals are halted by reconciliation")

// refuseHalted is the 409 of an approval or a mark-broadcast (what) of a
// halted asset, with the reasons; nil when a is not halted.
func refuseHalted(a asset.Asset, what string) error {
	if a.WithdrawalsHaltedSince == nil {
		return nil
	}
	return fault.Wrap(fault.Conflict, fmt.Sprintf("%s refused: %s withdrawals are halted: %s (svc admin reconciliation ack, once you have looked)",
		what, a.Code, strings.Join(reasonsHalted(a), "; ")), ErrHalted)
}

// returnedStatuses are the statuses whose money has been returned: the
// rolling caps count every other one.
var returnedStatuses = []Status{StatusRejected, StatusRefunded}

// userTotal is the gross of the user's withdrawals of the asset in the 24
// hours before now that still count. Called after the hold, which locks the
// user's available balance until commit, so that it sees every earlier
// request of the same user.
func userTotal(ctx context.Context, idb bun.IDB, user, code string, now time.Time) (int64, error) {
	var sum int64
	err := idb.NewSelect().Model((*Withdrawal)(nil)).ColumnExpr("coalesce(sum(amount_gross), 0)").
		Where("external_user_id = ? AND asset = ? AND created_at > ?", user, code, now.Add(-Window)).
		Where("status NOT IN (?)", bun.List(returnedStatuses)).Scan(ctx, &sum)
	if err != nil {
		return 0, fmt.Errorf("read the user's 24-hour withdrawal total: %w", err)
	}
	return sum, nil
}

// windowReserve counts gross in the asset's rolling volume at now and
// returns the volume including it, as a transaction of its own
// (withdrawal_window_reserve in migration 0007): the asset's window row is
// locked for this one statement only, so concurrent requests of one asset
// are decided strictly one after the other without waiting for each
// other's commits. idb must not be a transaction. The caller gives the
// reservation back with windowSub when its withdrawal does not commit.
func windowReserve(ctx context.Context, idb bun.IDB, code string, gross int64, now time.Time) (int64, error) {
	// Only the pool: in a caller's transaction the reservation's
	// asynchronous commit would cover the caller's writes too.
	pool, ok := idb.(*bun.DB)
	if !ok {
		return 0, fmt.Errorf("withdrawal: the volume reservation needs its own transaction, not a %T", idb)
	}
	q, err := db.SQLOf(pool)
	if err != nil {
		return 0, err
	}
	var total int64
	if err := q.QueryRowContext(ctx, "SELECT withdrawal_window_reserve($1, $2, $3)", code, gross, now).Scan(&total); err != nil {
		return 0, fmt.Errorf("count the withdrawal in the %s 24-hour volume: %w", code, err)
	}
	return total, nil
}

// windowSub takes a withdrawal whose money was returned out of the volume.
func windowSub(ctx context.Context, idb bun.IDB, code string, minute time.Time, gross int64) error {
	q, err := db.SQLOf(idb)
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, "SELECT withdrawal_window_sub($1, $2, $3)", code, minute, gross); err != nil {
		return fmt.Errorf("take %d out of the %s 24-hour volume: %w", gross, code, err)
	}
	return nil
}
