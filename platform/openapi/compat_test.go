package openapi_test

// The interface's compatibility check (docs/api-changelog.md): openapi.json
// against the last released document, releases/<version>.json.
//
// Cutting a release: set info.version in openapi.json to the version
// released, copy openapi.json to releases/<version>.json byte for byte,
// and move the version's entry in docs/api-changelog.md from "unreleased"
// to released. From then on this test compares openapi.json with that
// copy: whatever would break a client of it (a path or operation removed,
// a response field removed, a request field removed, renamed or made
// required, a type narrowed: an enum shrunk in a request, a type changed, a
// maxLength lowered, ...) fails unless info.version's major is greater.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oasdiff/oasdiff/checker"
	"github.com/oasdiff/oasdiff/diff"
	"github.com/oasdiff/oasdiff/load"
	"github.com/stretchr/testify/require"

	"svc/platform/openapi"
)

// accepted are findings of the check against a release that were reviewed
// and kept, each listed with its reason under that release's successor in
// docs/api-changelog.md ("What a strict 0.2.0 client sees"). A finding is
// accepted when its rule id is one of ids, its operation ("METHOD path")
// one of ops, and its text names the property prop (in backquotes, the
// whole name): the same change elsewhere is still reported.
var accepted = map[string][]acceptedFinding{
	"0.2.0": {
		// A deposit or withdrawal of a platform account has no user: its
		// external_user_id is null (0.3.0, platform accounts).
		{nullable, "external_user_id", []string{"GET /v1/deposits/{deposit_id}", "GET /v1/withdrawals/{withdrawal_id}",
			"POST /v1/admin/withdrawals/{id}/approve", "POST /v1/admin/withdrawals/{id}/mark-broadcast",
			"POST /v1/admin/withdrawals/{id}/reject", "POST /v1/admin/withdrawals/{id}/release",
			"POST /v1/deposits", "POST /v1/withdrawals"}},
		{nullable, "deposit/external_user_id", []string{"POST /v1/admin/deposits/{deposit_id}/resolve"}},
		{nullable, "deposits/items/external_user_id", []string{"GET /v1/admin/deposits/review", "GET /v1/users/{external_user_id}/deposits"}},
		{nullable, "withdrawals/items/external_user_id", []string{"GET /v1/admin/withdrawals", "GET /v1/users/{external_user_id}/withdrawals"}},
		{nullable, "reservations/items/external_user_id", []string{"GET /v1/deposits/{deposit_id}/address-history"}},
		// Event types are open (receivers ignore unknown types): the
		// transfer and hold events.
		{enumAdded, "type", []string{"GET /v1/events/{event_id}"}},
		{enumAdded, "events/items/type", []string{"GET /v1/events", "GET /v1/admin/events"}},
		// A user's transactions show the transfers and escrow holds they
		// take part in.
		{enumAdded, "transactions/items/kind", []string{"GET /v1/users/{external_user_id}/transactions"}},
		{enumAdded, "transactions/items/account", []string{"GET /v1/users/{external_user_id}/transactions"}},
	},
}

// acceptedFinding is an accepted change of one property on the operations
// listed.
type acceptedFinding struct {
	ids  []string
	prop string
	ops  []string
}

var (
	// nullable is what a string property made nullable is found as.
	nullable = []string{"response-property-list-of-types-widened", "response-property-max-length-unset", "response-property-min-length-unset"}
	// enumAdded is a response enum's new value.
	enumAdded = []string{"response-property-enum-value-added"}
)

// accepts reports whether a accepts the finding id on operation op
// ("METHOD path") whose text is text.
func (a acceptedFinding) accepts(id, op, text string) bool {
	return slices.Contains(a.ids, id) && slices.Contains(a.ops, op) && strings.Contains(text, "`"+a.prop+"`")
}

// semver is a version's major, minor and patch.
type semver [3]int

func parseVersion(v string) (semver, error) {
	var out semver
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH", v)
		}
		out[i] = n
	}
	return out, nil
}

func (a semver) less(b semver) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// latestRelease returns the newest document under releases/ and its
// version (the file's name).
func latestRelease(t *testing.T) (string, []byte) {
	t.Helper()
	files, err := filepath.Glob("releases/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files, "releases/ holds the last released openapi.json")
	var best string
	var bestV semver
	for _, f := range files {
		v, err := parseVersion(strings.TrimSuffix(filepath.Base(f), ".json"))
		require.NoError(t, err, f)
		if best == "" || bestV.less(v) {
			best, bestV = f, v
		}
	}
	b, err := os.ReadFile(best)
	require.NoError(t, err)
	return strings.TrimSuffix(filepath.Base(best), ".json"), b
}

// breaks lists what would break a client of base in rev, as oasdiff's
// checker finds it (level error), without the findings accepted for
// base's version.
func breaks(base, rev []byte) ([]string, error) {
	loader := openapi3.NewLoader()
	s1, err := loader.LoadFromData(base)
	if err != nil {
		return nil, fmt.Errorf("base: %w", err)
	}
	s2, err := openapi3.NewLoader().LoadFromData(rev)
	if err != nil {
		return nil, fmt.Errorf("revision: %w", err)
	}
	d, src, err := diff.GetWithOperationsSourcesMap(diff.NewConfig(),
		&load.SpecInfo{Url: "release", Spec: s1, Version: s1.Info.Version}, &load.SpecInfo{Url: "openapi.json", Spec: s2, Version: s2.Info.Version})
	if err != nil {
		return nil, err
	}
	l := checker.NewDefaultLocalizer()
	var out []string
	// A request field or parameter removed or renamed is a break here
	// (oasdiff warns): a client still sending it would be ignored, or
	// refused, where it was heard.
	config := checker.NewConfig(checker.GetAllChecks(), checker.WithSeverityLevels(map[string]checker.Level{
		checker.RequestPropertyRemovedId: checker.ERR, checker.RequestParameterRemovedId: checker.ERR}))
	for _, c := range checker.CheckBackwardCompatibility(config, d, src) {
		if c.GetLevel() != checker.ERR {
			continue
		}
		text := c.GetUncolorizedText(l)
		ok := false
		for _, a := range accepted[s1.Info.Version] {
			ok = ok || a.accepts(c.GetId(), c.GetOperation()+" "+c.GetPath(), text)
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s %s: %s [%s]", c.GetOperation(), c.GetPath(), text, c.GetId()))
		}
	}
	return out, nil
}

// compatible is the policy: rev may follow base when nothing breaks, or
// when its major version is greater than base's; its version is never
// lower than base's.
func compatible(base, rev []byte) error {
	bv, err := openapi.VersionOf(base)
	if err != nil {
		return err
	}
	rv, err := openapi.VersionOf(rev)
	if err != nil {
		return err
	}
	b, err := parseVersion(bv)
	if err != nil {
		return err
	}
	r, err := parseVersion(rv)
	if err != nil {
		return err
	}
	if r.less(b) {
		return fmt.Errorf("info.version %s is lower than the released %s", rv, bv)
	}
	if r[0] > b[0] {
		return nil // a new major version may break anything
	}
	found, err := breaks(base, rev)
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("%d change(s) from %s to %s break a client of %s, which only a new major version may do (docs/api-changelog.md):\n%s",
			len(found), bv, rv, bv, strings.Join(found, "\n"))
	}
	return nil
}

// TestNothingBreaksSinceTheLastRelease: openapi.json keeps every promise
// of the newest document under releases/ unless its major version is
// greater.
func TestNothingBreaksSinceTheLastRelease(t *testing.T) {
	t.Parallel()
	version, base := latestRelease(t)
	v, err := openapi.VersionOf(base)
	require.NoError(t, err)
	require.Equal(t, version, v, "releases/%s.json is the document of version %s", version, version)
	require.NoError(t, compatible(base, openapi.Spec))
}

// mutate returns openapi.json with edit applied.
func mutate(t *testing.T, edit func(d map[string]any)) []byte {
	t.Helper()
	var d map[string]any
	require.NoError(t, json.Unmarshal(openapi.Spec, &d))
	edit(d)
	b, err := json.Marshal(d)
	require.NoError(t, err)
	return b
}

func schema(d map[string]any, name string) map[string]any {
	return d["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
}

func props(d map[string]any, name string) map[string]any {
	return schema(d, name)["properties"].(map[string]any)
}

// TestTheCheckFindsBreaks: the check is able to fail: against openapi.json
// itself, each break below is found and refused within the same major
// version, and let through by a major version's bump; an additive change
// is let through as it is.
func TestTheCheckFindsBreaks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, id string
		edit     func(d map[string]any)
	}{
		{"a response field removed", "response-required-property-removed", func(d map[string]any) {
			delete(props(d, "Deposit"), "status")
			s := schema(d, "Deposit")
			var req []any
			for _, r := range s["required"].([]any) {
				if r != "status" {
					req = append(req, r)
				}
			}
			s["required"] = req
		}},
		{"a request enum narrowed", "request-property-enum-value-removed", func(d map[string]any) {
			props(d, "ResolveRequest")["action"].(map[string]any)["enum"] = []any{"credit"}
		}},
		{"a request field made required", "request-property-became-required", func(d map[string]any) {
			s := schema(d, "CreateDepositRequest")
			s["required"] = append(s["required"].([]any), "expected_amount")
		}},
		{"a request field renamed", "request-property-removed", func(d map[string]any) {
			p := props(d, "CreateDepositRequest")
			p["expected"] = p["expected_amount"]
			delete(p, "expected_amount")
		}},
		{"a request maxLength lowered", "request-property-max-length-decreased", func(d map[string]any) {
			props(d, "CreateDepositRequest")["expected_amount"].(map[string]any)["maxLength"] = 10
		}},
		{"a request field's type changed", "request-property-type-changed", func(d map[string]any) {
			props(d, "CreateDepositRequest")["expected_amount"].(map[string]any)["type"] = []any{"integer", "null"}
		}},
		{"an operation removed", "api-path-removed-without-deprecation", func(d map[string]any) {
			delete(d["paths"].(map[string]any), "/v1/assets")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			broken := mutate(t, c.edit)
			err := compatible(openapi.Spec, broken)
			require.Error(t, err)
			require.Contains(t, err.Error(), "["+c.id+"]")
			major := mutate(t, func(d map[string]any) {
				c.edit(d)
				d["info"].(map[string]any)["version"] = "1.0.0"
			})
			require.NoError(t, compatible(openapi.Spec, major), "a new major version may break")
		})
	}
	added := mutate(t, func(d map[string]any) {
		props(d, "Deposit")["note"] = map[string]any{"type": "string"}
		props(d, "CreateDepositRequest")["note"] = map[string]any{"type": "string"}
	})
	require.NoError(t, compatible(openapi.Spec, added), "an optional request field and a response field are additions")
	lower := mutate(t, func(d map[string]any) { d["info"].(map[string]any)["version"] = "0.0.1" })
	require.ErrorContains(t, compatible(openapi.Spec, lower), "lower than the released")
}

// TestAcceptedFindingsAreScoped: a finding accepted against the release is
// accepted on its own operations and property only: the same change to
// another response (a user's balances' external_user_id made nullable) is
// reported.
func TestAcceptedFindingsAreScoped(t *testing.T) {
	t.Parallel()
	version, base := latestRelease(t)
	require.NotEmpty(t, accepted[version], "the release has accepted findings")
	found, err := breaks(base, openapi.Spec)
	require.NoError(t, err)
	require.Empty(t, found)
	widened := mutate(t, func(d map[string]any) {
		props(d, "BalancesResponse")["external_user_id"] = map[string]any{
			"anyOf": []any{map[string]any{"$ref": "#/components/schemas/ExternalUserId"}, map[string]any{"type": "null"}}}
	})
	found, err = breaks(base, widened)
	require.NoError(t, err)
	require.NotEmpty(t, found)
	for _, f := range found {
		require.Contains(t, f, "/balances")
		require.Contains(t, f, "external_user_id")
	}
	require.Contains(t, strings.Join(found, "\n"), "[response-property-list-of-types-widened]")
}
