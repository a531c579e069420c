package ledger

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// Limits of an entry's fields (the migration's CHECKs say the same).
const (
	MaxSourceRef = 512  // characters
	MaxMemo      = 2000 // characters
	MaxOwner     = 255  // characters: external_user_id
	MaxAsset     = 32   // characters
	maxLines     = 16   // no movement needs more; keeps statements small
)

// Validate checks that e can be posted: a known kind, an asset, a source
// reference, two or more lines on distinct well-formed accounts, no zero
// amount, and a sum of exactly zero (computed without overflow). Errors
// wrap ErrInvalidEntry.
func (e Entry) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidEntry, fmt.Sprintf(format, args...))
	}
	if !e.Kind.Valid() {
		return bad("unknown entry kind %q", e.Kind)
	}
	if n := utf8.RuneCountInString(e.Asset); n < 1 || n > MaxAsset || !utf8.ValidString(e.Asset) {
		return bad("asset must have 1 to %d characters", MaxAsset)
	}
	if n := utf8.RuneCountInString(e.SourceRef); n < 1 || n > MaxSourceRef || !utf8.ValidString(e.SourceRef) {
		return bad("source_ref must have 1 to %d characters", MaxSourceRef)
	}
	if utf8.RuneCountInString(e.Memo) > MaxMemo || !utf8.ValidString(e.Memo) {
		return bad("memo must have at most %d characters", MaxMemo)
	}
	if hasNUL(e.Asset) || hasNUL(e.SourceRef) || hasNUL(e.Memo) {
		return bad("text fields must not contain NUL")
	}
	if e.Kind == Correction && e.Memo == "" {
		return bad("a correction needs a memo saying why")
	}
	if len(e.Lines) < 2 || len(e.Lines) > maxLines {
		return bad("an entry needs 2 to %d lines, got %d", maxLines, len(e.Lines))
	}
	seen := make(map[Account]bool, len(e.Lines))
	var sum int64
	for i, l := range e.Lines {
		if err := l.Account.validate(); err != nil {
			return bad("line %d: %v", i, err)
		}
		if seen[l.Account] {
			return bad("line %d: account %s appears twice", i, l.Account)
		}
		seen[l.Account] = true
		if l.Amount == 0 {
			return bad("line %d: amount is zero", i)
		}
		if l.Amount == math.MinInt64 {
			return bad("line %d: amount out of range", i)
		}
		next := sum + l.Amount
		// Overflow iff both operands have the same sign and the result's
		// sign differs.
		if (sum > 0 && l.Amount > 0 && next < 0) || (sum < 0 && l.Amount < 0 && next >= 0) {
			return bad("line %d: amounts overflow", i)
		}
		sum = next
	}
	if sum != 0 {
		return bad("lines sum to %d, not zero", sum)
	}
	return nil
}

func (a Account) validate() error {
	if !a.Kind.Valid() {
		return fmt.Errorf("unknown account kind %q", a.Kind)
	}
	if a.Kind == PlatformAvailable {
		if !validShardOwner(a.Owner) {
			return fmt.Errorf("%s needs a platform account name of 1 to %d characters of [a-z0-9_.:-], or a shard's name#k", a.Kind, MaxPlatformName)
		}
		return nil
	}
	if a.Kind.IsPlatform() {
		if !ValidPlatformName(a.Owner) {
			return fmt.Errorf("%s needs a platform account name of 1 to %d characters of [a-z0-9_.:-]", a.Kind, MaxPlatformName)
		}
		return nil
	}
	if a.Kind.IsUsers() {
		if n := utf8.RuneCountInString(a.Owner); n < 1 || n > MaxOwner || !utf8.ValidString(a.Owner) || hasNUL(a.Owner) {
			return fmt.Errorf("%s needs an external_user_id of 1 to %d characters", a.Kind, MaxOwner)
		}
		return nil
	}
	if a.Owner != "" {
		return fmt.Errorf("system account %s has no owner", a.Kind)
	}
	return nil
}

func hasNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
