// Package ledger owns the service's append-only double-entry ledger: the
// accounts, the entries (one business fact each) and their postings, the
// standard money movements that deposits and withdrawals post inside their
// own transactions, users' balances and history, and the consistency check
// that reconciliation reuses.
//
// # Accounts
//
// Each (asset, kind, owner) is one account. Every user has a user_available,
// a user_hold and a user_escrow account per asset (owner = external_user_id),
// created on demand by the first posting that credits it. A platform account
// (the platform's own money: revenue, prize pools, commissions; owner = its
// name, 1 to 64 characters of [a-z0-9_.:-]) has the same three:
// platform_available, platform_hold and platform_escrow. A Holder names a
// user or a platform account and gives its three accounts. Every asset has six system
// accounts (owner ""): custody (what the service's wallets hold), in_flight
// (payouts broadcast but not yet confirmed), fee_income (service fees
// earned), network_fees (network fees paid), suspense (money received but
// not yet attributed, e.g. awaiting review) and transfer, the clearing account of money moved between two custodies of the same coin
// (migration 0036; see BookTransfer).
//
// Owned accounts (users' and platform accounts') carry a materialized
// balance, changed in the same statement
// that writes their postings. A debit is the guarded update
//
//	UPDATE ledger_accounts SET balance = balance - $1 WHERE id = $2 AND balance >= $1
//
// and zero rows means insufficient funds: there is no read-then-write, and a
// CHECK (balance >= 0) backs it up. Each user posting carries the balance
// its account's update returned (balance_after), and the database refuses,
// at the end of any statement and from any role, a balance that is not its
// latest posting's balance_after or a posting that does not continue the
// chain (migration 0014): a balance cannot move without its postings. System account balances are derived from
// their postings: they are on every deposit and payout, and a materialized
// row would serialize all of them (docs/performance.md has the comparison).
//
// # Signs
//
// A posting's amount is positive for a credit and negative for a debit; the
// postings of an entry sum to zero. user_available, user_hold, fee_income and
// suspense are credit-normal: their balance is the sum of their postings.
// custody, in_flight and network_fees are debit-normal (assets and
// expenses): their balance is minus that sum. In normal operation every
// balance is therefore non-negative.
//
// # Entry kinds and their exact postings
//
// Amounts below are in smallest units; u is the user (or, for a deposit
// or a withdrawal of a platform account, that account: platform_available
// and platform_hold stand for user_available and user_hold), + credit, -
// debit. Transfers and escrow holds move money between holders and never
// touch custody.
//
//	deposit_credit      X: user_available(u) +X, custody -X
//	withdrawal_hold     G: user_available(u) -G, user_hold(u) +G
//	withdrawal_release  G: user_hold(u) -G, user_available(u) +G
//	payout_broadcast    S: custody +S, in_flight -S   (S = net + network fee sent)
//	payout_settle          user_hold(u) -G
//	                       fee_income   +F            (service fee; 0 under absorb)
//	                       network_fees -NF           (actual network fee)
//	                       in_flight    +B            (B = S of this payout's broadcast, 0 if none)
//	                       custody      +(N + NF - B) (the rest of what left the wallet)
//	transfer            X: available(from) -X, available(to) +X  (one leg;
//	                       source_ref "<transfer id>:<leg>")
//	escrow_hold         X: available(p) -X, escrow(p) +X  (p the payer)
//	escrow_capture      C: escrow(p) -C, available(r) +c_r for each
//	                       recipient r (C the sum of the c_r)
//	escrow_release      R: escrow(p) -R, available(p) +R  (the rest after a
//	                       capture, or all of it on a void or an expiry)
//	shard_sweep            platform_available(name#k) -b_k for each shard k
//	                       with money, platform_available(name) +sum b_k
//	                       (a debit's gather: a platform account's shards, see
//	                       PlatformShards)
//	correction             any balanced lines, with a memo saying why
//	                       (an operator's: BookCorrection, CorrectionAllowed)
//	correction (transfer)  X from asset A to asset B, network fee NF, two
//	                       entries posted together (BookTransfer):
//	                       in A: custody +(X+NF), network_fees -NF, transfer -X
//	                       in B: custody -X, transfer +X
//
// Under fee mode deduct, N = G - F: the user pays the service fee out of the
// gross. Under absorb, N = G and F = 0: the user receives the whole gross and
// the service bears the network fee. Either way the gross leaves user_hold,
// net plus the actual network fee leave custody (at broadcast, at settlement,
// or split between them), and the service fee becomes fee income. Lines of
// zero are left out. A correction never edits an earlier entry; it is a new
// one.
//
// The hold, release, broadcast and settlement of one withdrawal share its
// source_ref (the withdrawal id): release and settlement check the hold under
// that reference and refuse to undo or pay out a hold twice.
//
// # Operator bookings
//
// An operator books what happened outside the service's own flows (a fee
// the processor paid and did not report, a Lightning routing fee, money
// found in or missing from a wallet, a channel opened from the on-chain
// wallet) with a correction entry (BookCorrection) or a pair of them
// (BookTransfer), never by editing an entry. Each is one transaction with
// its audit record (ledger.correct, ledger.transfer): the entries, the
// balances before and after every line, the memo and the operator.
//
// What a correction may post to (CorrectionAllowed):
//
//	custody, network_fees, fee_income, suspense   yes
//	user_available, platform_available            yes: a credit is audited
//	                                              like any other line, and a
//	                                              debit never takes the
//	                                              balance below zero
//	user_hold, platform_hold                      no: holds belong to open
//	                                              withdrawals (release them)
//	user_escrow, platform_escrow                  no: escrow belongs to open
//	                                              escrow holds (void them)
//	in_flight                                     no: it follows broadcast
//	                                              payouts, one per withdrawal
//	transfer                                      no: only BookTransfer
//	                                              posts to it
//
// No line may leave its account's balance negative (in the account's own
// sense; user accounts are guarded by the database too), and the lines
// must balance; what is refused is refused whole, with nothing written.
//
// # Idempotency
//
// (kind, source_ref) is unique: posting the same fact again returns the
// first entry (Posted.Replayed) and changes nothing; posting it again with
// other lines is ErrReplayMismatch.
//
// # Transactions
//
// Every function takes a bun.IDB: the caller's transaction, so that its
// domain-row update, the entry, the outbound event and the jobs commit
// together. A posting is a single SQL statement, so it is also atomic on its
// own. When a function returns an error, roll the transaction back.
package ledger

import (
	"fmt"
	"time"

	"svc/platform/fault"
)

// AccountKind says what an account is.
type AccountKind string

// The account kinds. The first two are per user and asset, the rest per
// asset.
const (
	UserAvailable AccountKind = "user_available" // what the user may spend or withdraw
	UserHold      AccountKind = "user_hold"      // reserved by the user's open withdrawals
	Custody       AccountKind = "custody"        // held in the service's wallets
	InFlight      AccountKind = "in_flight"      // broadcast payouts not yet confirmed
	FeeIncome     AccountKind = "fee_income"     // service fees earned
	NetworkFees   AccountKind = "network_fees"   // network fees the service paid
	Suspense      AccountKind = "suspense"       // received but not yet attributed (review)
	// Transfer clears money moved between two custodies of the same coin
	// (BTC and BTC_LN): debited in the asset that sent, credited in the
	// one that received (BookTransfer).
	Transfer AccountKind = "transfer"

	// The accounts of money moved inside the platform (docs/transfers.md).
	// Owned and materialized like a user's available and hold accounts.
	UserEscrow        AccountKind = "user_escrow"        // reserved by the user's open escrow holds
	PlatformAvailable AccountKind = "platform_available" // a platform account's spendable money
	PlatformHold      AccountKind = "platform_hold"      // reserved by the platform account's open withdrawals
	PlatformEscrow    AccountKind = "platform_escrow"    // reserved by the platform account's open escrow holds
)

// AccountKinds lists every account kind.
func AccountKinds() []AccountKind {
	return []AccountKind{UserAvailable, UserHold, Custody, InFlight, FeeIncome, NetworkFees, Suspense, Transfer,
		UserEscrow, PlatformAvailable, PlatformHold, PlatformEscrow}
}

// Materialized reports an owned account kind, a user's or a platform
// account's, whose balance is materialized on its row and guarded there.
func (k AccountKind) Materialized() bool { return k.IsUsers() || k.IsPlatform() }

// IsUsers reports an account kind a user owns (owner = external_user_id).
func (k AccountKind) IsUsers() bool { return k == UserAvailable || k == UserHold || k == UserEscrow }

// IsPlatform reports an account kind a platform account owns (owner = its
// name).
func (k AccountKind) IsPlatform() bool {
	return k == PlatformAvailable || k == PlatformHold || k == PlatformEscrow
}

// Valid reports one of the known kinds.
func (k AccountKind) Valid() bool {
	for _, x := range AccountKinds() {
		if k == x {
			return true
		}
	}
	return false
}

// DebitNormal reports an account whose natural balance is minus the sum of
// its postings (custody, in_flight, network_fees, transfer). A transfer
// account's balance is what its asset's custody sent to the other custody
// of the pair less what it received: positive in the asset that sent more,
// negative in the other; the pair's two balances sum to zero.
func (k AccountKind) DebitNormal() bool {
	return k == Custody || k == InFlight || k == NetworkFees || k == Transfer
}

// Natural turns the sum of an account's postings into its balance in the
// account's own sense (see the package doc's signs).
func (k AccountKind) Natural(sum int64) int64 {
	if k.DebitNormal() {
		return -sum
	}
	return sum
}

// EntryKind names the business event an entry records. The API shows it on
// every transaction; openapi.json lists exactly these values.
type EntryKind string

// The entry kinds. The package doc lists each one's postings.
const (
	// DepositCredit: a confirmed deposit payment credited to the user (one
	// entry per payment; source_ref identifies the payment).
	DepositCredit EntryKind = "deposit_credit"
	// WithdrawalHold: a withdrawal's gross moved from available to hold.
	WithdrawalHold EntryKind = "withdrawal_hold"
	// WithdrawalRelease: a hold returned to available (rejection, operator
	// release, expired Lightning invoice).
	WithdrawalRelease EntryKind = "withdrawal_release"
	// PayoutBroadcast: a payout went on chain; custody to in-flight, system
	// accounts only, so the user's money stays held until confirmation.
	PayoutBroadcast EntryKind = "payout_broadcast"
	// PayoutSettle: a payout confirmed; the hold is spent.
	PayoutSettle EntryKind = "payout_settle"
	// Correction: an operator's correction, always a new entry.
	Correction EntryKind = "correction"
	// TransferEntry: one leg of a transfer between two holders' available
	// accounts (source_ref: the transfer id and the leg's index).
	TransferEntry EntryKind = "transfer"
	// EscrowHold: an escrow hold moved money from available to reserved
	// (source_ref: the hold id).
	EscrowHold EntryKind = "escrow_hold"
	// EscrowCapture: a hold's captured part paid from reserved to its
	// recipients (source_ref: the hold id).
	EscrowCapture EntryKind = "escrow_capture"
	// EscrowRelease: the rest of a hold (after a capture) or all of it (void,
	// expiry) returned from reserved to available (source_ref: the hold id).
	EscrowRelease EntryKind = "escrow_release"
	// ShardSweep: a platform account's shards gathered into its own row
	// before a debit (source_ref "sweep:<uuid>"). It moves nothing
	// in or out of the account, and no history lists it.
	ShardSweep EntryKind = "shard_sweep"
)

// EntryKinds lists every entry kind.
func EntryKinds() []EntryKind {
	return []EntryKind{DepositCredit, WithdrawalHold, WithdrawalRelease, PayoutBroadcast, PayoutSettle, Correction,
		TransferEntry, EscrowHold, EscrowCapture, EscrowRelease, ShardSweep}
}

// Valid reports one of the known kinds.
func (k EntryKind) Valid() bool {
	for _, x := range EntryKinds() {
		if k == x {
			return true
		}
	}
	return false
}

// Account names an account within an entry's asset.
type Account struct {
	Kind  AccountKind
	Owner string // external_user_id for user kinds, the name for platform kinds, "" for system kinds
}

// User returns a user's account of kind k.
func User(k AccountKind, externalUserID string) Account {
	return Account{Kind: k, Owner: externalUserID}
}

// System returns the per-asset system account of kind k.
func System(k AccountKind) Account { return Account{Kind: k} }

func (a Account) String() string {
	if a.Owner == "" {
		return string(a.Kind)
	}
	return fmt.Sprintf("%s(%q)", a.Kind, a.Owner)
}

// Line is one posting of an entry to be made: positive credits, negative
// debits.
type Line struct {
	Account Account
	Amount  int64
}

// Entry is an entry to be posted.
type Entry struct {
	Kind      EntryKind
	Asset     string
	SourceRef string // what caused it: a deposit payment, a withdrawal id, ...
	Memo      string // optional free text; required for corrections
	Lines     []Line
	// Locked is the caller's promise that LockAccounts has locked, earlier
	// in the same transaction, every materialized account of the entry;
	// Post then does not lock them again before it moves their balances
	// (see buildPost). A broken promise cannot move a balance wrongly:
	// every guard stays. It can only make two postings wait for each
	// other, which the database detects and ends by rolling one back
	// (SQLSTATE 40P01), or fail a credit to an account that does not
	// exist, writing nothing.
	Locked bool
}

// Posting is one stored posting.
type Posting struct {
	ID      int64
	EntryID int64
	Account Account
	Amount  int64
}

// Posted is a stored entry with its postings.
type Posted struct {
	ID        int64
	Kind      EntryKind
	Asset     string
	SourceRef string
	Memo      string
	CreatedAt time.Time
	Postings  []Posting
	// Replayed is true when the entry had been posted before and nothing
	// changed this time.
	Replayed bool
}

// Errors. Kinds map to HTTP statuses in platform/httpapi.
var (
	// ErrInsufficientFunds: a user account would go below zero. Returned
	// wrapped in *InsufficientFundsError.
	ErrInsufficientFunds = fault.New(fault.InsufficientFunds, "insufficient available balance")
	// ErrInvalidEntry: an entry that cannot be posted (a bug in the caller).
	ErrInvalidEntry = fault.New(fault.Internal, "invalid ledger entry")
	// ErrReplayMismatch: (kind, source_ref) was posted before with other
	// lines. The first entry stands.
	ErrReplayMismatch = fault.New(fault.Conflict, "ledger entry already posted with different amounts")
	// ErrConcurrentPost: another transaction posted the same (kind,
	// source_ref) at the same moment and committed first; retrying finds it.
	ErrConcurrentPost = fault.New(fault.Conflict, "the same ledger entry is being posted concurrently").WithRetryAfter(time.Second)
	// ErrNoHold: no withdrawal hold under this source_ref matches the
	// release, broadcast or settlement.
	ErrNoHold = fault.New(fault.Conflict, "no matching withdrawal hold")
	// ErrHoldReleased: the hold under this source_ref was released already.
	ErrHoldReleased = fault.New(fault.Conflict, "withdrawal hold was already released")
	// ErrHoldSettled: the hold under this source_ref was paid out already.
	ErrHoldSettled = fault.New(fault.Conflict, "withdrawal hold was already settled")
)

// InsufficientFundsError says which account was short. It matches
// ErrInsufficientFunds with errors.Is, and its fault kind is
// InsufficientFunds (HTTP 402).
type InsufficientFundsError struct {
	Asset   string
	Account Account
	Amount  int64 // the debit that did not fit
}

func (e *InsufficientFundsError) Error() string {
	return fmt.Sprintf("ledger: insufficient funds: %s %s cannot be debited %d", e.Asset, e.Account, e.Amount)
}

// Unwrap makes the error match ErrInsufficientFunds and carry its kind.
func (e *InsufficientFundsError) Unwrap() error { return ErrInsufficientFunds }
