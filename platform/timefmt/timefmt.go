// Package timefmt renders timestamps the way the SPEC wants them: RFC 3339
// in UTC with an explicit +00:00 offset, never Z.
package timefmt

import "time"

// Layout is RFC 3339 with an explicit +00:00 offset (the SPEC's form;
// time.RFC3339 would print Z for UTC).
const Layout = "2006-01-02T15:04:05.000000-07:00"

// Format formats t in UTC with an explicit +00:00.
func Format(t time.Time) string { return t.UTC().Format(Layout) }

// Ptr formats t, or returns nil for a nil or zero time.
func Ptr(t *time.Time) *string {
	if t == nil || t.IsZero() {
		return nil
	}
	s := Format(*t)
	return &s
}
