package ledger

import (
	"fmt"

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

// HolderOf returns the holder that owns a materialized account.
func HolderOf(a Account) Holder { return Holder{Platform: a.Kind.IsPlatform(), ID: a.Owner} }

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
