package ledger

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"svc/platform/fault"
)

// MaxPlatformName is the longest platform account name.
const MaxPlatformName = 64

// Holder owns money in the ledger: a user (ID is the platform's
// external_user_id) or a platform account (ID is its name). Each holder
// has, per asset, an available account, a hold account (its open
// withdrawals) and an escrow account (its open escrow holds), created by
// their first credit.
type Holder struct {
	Platform bool   // a platform account; otherwise a user
	ID       string // the external_user_id, or the platform account's name
}

// UserHolder is the user with this external_user_id.
func UserHolder(externalUserID string) Holder { return Holder{ID: externalUserID} }

// PlatformHolder is the platform account with this name.
func PlatformHolder(name string) Holder { return Holder{Platform: true, ID: name} }

// ValidPlatformName reports a platform account name: 1 to 64 characters of
// [a-z0-9_.:-] (migration 0038 says the same of the account's owner).
func ValidPlatformName(name string) bool {
	if len(name) < 1 || len(name) > MaxPlatformName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// Available is the holder's spendable account.
func (h Holder) Available() Account { return h.account(UserAvailable, PlatformAvailable) }

// Hold is the account of the holder's open withdrawals.
func (h Holder) Hold() Account { return h.account(UserHold, PlatformHold) }

// Escrow is the account of the holder's open escrow holds.
func (h Holder) Escrow() Account { return h.account(UserEscrow, PlatformEscrow) }

func (h Holder) account(user, platform AccountKind) Account {
	if h.Platform {
		return Account{Kind: platform, Owner: h.ID}
	}
	return Account{Kind: user, Owner: h.ID}
}

// kinds lists the holder's three account kinds: available, hold, escrow.
func (h Holder) kinds() [3]AccountKind {
	if h.Platform {
		return [3]AccountKind{PlatformAvailable, PlatformHold, PlatformEscrow}
	}
	return [3]AccountKind{UserAvailable, UserHold, UserEscrow}
}

func (h Holder) String() string {
	if h.Platform {
		return fmt.Sprintf("platform account %q", h.ID)
	}
	return fmt.Sprintf("user %q", h.ID)
}

// HolderOf returns the holder that owns a materialized account (a shard's
// holder is its platform account).
func HolderOf(a Account) Holder {
	if a.Kind.IsPlatform() {
		return Holder{Platform: true, ID: PlatformName(a.Owner)}
	}
	return Holder{ID: a.Owner}
}

// A platform account's available balance is kept in PlatformShards rows
// per asset, so that the credits of many concurrent transfers and
// captures (every purchase paying one revenue account) do not queue on
// one row: shard 0 is the account's own row (owner = its name) and shard k
// (1 <= k < PlatformShards) the row whose owner is name#k ('#' is outside
// the names' alphabet, so no name is ever a shard). Each shard is an
// ordinary materialized account under every database guard (never
// negative, its balance_after chain, append-only). The balance is the sum
// of the shards.
//
//   - A credit of a transfer leg or a capture goes to one of shards 1 to
//     63, chosen from the fact's source_ref (CreditAccount): a replay
//     posts to the same one, and concurrent credits spread over them.
//   - Every other credit (a deposit, a release) and every debit is shard
//     0's. A platform account's debit locks the account with all its
//     shards first (LockAccounts), and, when shard 0 cannot cover it,
//     sweeps the other shards into shard 0 (shard_sweep entries) before
//     it posts: it is refused only when the whole balance cannot cover it.
//   - When one of an account's available rows is created (its first
//     credit in an asset), all its shards are, with balance 0 (migration
//     0046 created those of the accounts that existed before the shards):
//     no shard appears later, so every lock of them is taken in the one
//     order.
//   - Reads sum the shards (balances, the platform accounts' list, the
//     proof of liabilities); histories list every shard's postings but
//     the sweeps, which move nothing in or out of the account. The ledger
//     check finds a shard_sweep entry that is not one (CheckSweeps).
//
// docs/performance.md ("The hot account") has the measurements that chose
// 64. It changes only with a migration: a credit's shard is 1 + a hash of
// its source_ref modulo PlatformShards-1, so another count would post a
// replay to another shard (ErrReplayMismatch), and migration 0044 names 1
// to 63.
const PlatformShards = 64

// shardSep separates a platform account's name from its shard number in a
// shard's owner.
const shardSep = "#"

// PlatformName is the platform account a platform account's owner (its
// name, or a shard's name#k) belongs to.
func PlatformName(owner string) string {
	if i := strings.Index(owner, shardSep); i >= 0 {
		return owner[:i]
	}
	return owner
}

// shardOwner is the owner of shard k of the platform account name.
func shardOwner(name string, k int) string {
	if k == 0 {
		return name
	}
	return name + shardSep + strconv.Itoa(k)
}

// ShardOwners lists the owners of the platform account name's available
// shards, shard 0 (the name) first.
func ShardOwners(name string) []string {
	out := make([]string, PlatformShards)
	for k := range out {
		out[k] = shardOwner(name, k)
	}
	return out
}

// validShardOwner reports a platform_available owner: a name, or a name's
// shard name#k with 1 <= k < PlatformShards written without leading zeros.
func validShardOwner(owner string) bool {
	name, k, ok := strings.Cut(owner, shardSep)
	if !ok {
		return ValidPlatformName(owner)
	}
	n, err := strconv.Atoi(k)
	return err == nil && ValidPlatformName(name) && n >= 1 && n < PlatformShards && strconv.Itoa(n) == k
}

// CreditAccount is the account a credit of h's available balance for the
// fact sourceRef (a transfer leg, a capture) posts to: a user's available
// account, or one of a platform account's shards 1 to 63 chosen from
// sourceRef.
func (h Holder) CreditAccount(sourceRef string) Account {
	if !h.Platform {
		return h.Available()
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(sourceRef))
	// Shards 1 to 63: shard 0, the account's own row, is locked with all
	// the others by a debit's LockAccounts, and a credit naming it would be.
	return Account{Kind: PlatformAvailable, Owner: shardOwner(h.ID, 1+int(f.Sum32()%(PlatformShards-1)))}
}

// OwnerOf reads who a deposit or a withdrawal is for from its request:
// exactly one of external_user_id (a user) and platform_account (a
// platform account), a 422 field error otherwise. It returns the one
// given and "" for the other. The request's schema checks each one's form;
// the platform account's name is checked again here for other callers.
func OwnerOf(user, platform *string) (string, string, error) {
	switch {
	case user != nil && platform != nil:
		return "", "", fault.Validation(fault.FieldError{Loc: []any{"body", "platform_account"}, Type: "value_error", Input: *platform,
			Msg: "Give either external_user_id or platform_account, not both"})
	case user == nil && platform == nil:
		return "", "", fault.Validation(fault.FieldError{Loc: []any{"body", "external_user_id"}, Type: "missing",
			Msg: "Field required: external_user_id, or platform_account for a platform account"})
	case platform != nil:
		if !ValidPlatformName(*platform) {
			return "", "", fault.Validation(fault.FieldError{Loc: []any{"body", "platform_account"}, Type: "string_pattern_mismatch",
				Input: *platform, Msg: "String should match pattern '^[a-z0-9_.:-]{1,64}$'"})
		}
		return "", *platform, nil
	}
	return *user, "", nil
}
