package openapitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"svc/platform/openapi"
	"svc/platform/openapi/openapitest"
)

func TestDocumentIsValid(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.Load(context.Background(), openapi.Spec)
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.True(t, doc.IsOpenAPI31OrLater())
	require.Equal(t, "0.3.0", doc.Info.Version, "interface 0.3.0: SPEC 0.2.0 plus money moved inside the platform")
	require.Contains(t, doc.Components.SecuritySchemes, "bearerAuth")
	require.Equal(t, openapi3.SecurityRequirements{{"bearerAuth": {}}}, doc.Security)
}

// The file is kept formatted (two-space indentation, one trailing newline)
// so that diffs of the contract stay readable.
func TestDocumentIsFormatted(t *testing.T) {
	t.Parallel()
	var compact, indented bytes.Buffer
	require.NoError(t, json.Compact(&compact, openapi.Spec))
	require.NoError(t, json.Indent(&indented, compact.Bytes(), "", "  "))
	indented.WriteByte('\n')
	require.Equal(t, indented.String(), string(openapi.Spec), "openapi.json is not formatted with 2-space indentation")
}

// unauthenticated are the operations that need no API key.
var unauthenticated = map[string]bool{
	"/healthz": true, "/readyz": true, "/webhooks/processor": true,
	"/openapi.json": true, "/docs": true, "/docs/third_party/swagger-ui/{file}": true,
}

// The SPEC's conventions hold for every operation: a test per rule would
// catch one forgotten operation; this walks them all.
func TestEveryOperationFollowsTheConventions(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.Document()
	require.NoError(t, err)
	n := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			n++
			name := method + " " + path
			require.NotEmpty(t, op.OperationID, name)
			require.NotEmpty(t, op.Description, name)
			for code, r := range op.Responses.Map() {
				h := r.Value.Headers["Cache-Control"]
				require.NotNil(t, h, "%s %s: no Cache-Control header", name, code)
				require.True(t, h.Value.Required, "%s %s: Cache-Control not required", name, code)
				require.NotEmpty(t, r.Value.Content, "%s %s: no content", name, code)
			}
			if unauthenticated[path] {
				require.NotNil(t, op.Security, "%s must say security: []", name)
				require.Empty(t, *op.Security, "%s needs no API key", name)
				continue
			}
			require.True(t, strings.HasPrefix(path, "/v1/"), name)
			require.Nil(t, op.Security, "%s uses the global bearer scheme", name)
			require.NotNil(t, op.Responses.Status(http.StatusUnauthorized), "%s: no 401", name)
			require.NotNil(t, op.Responses.Status(http.StatusInternalServerError), "%s: no 500", name)
			if strings.HasPrefix(path, "/v1/admin/") {
				require.NotNil(t, op.Responses.Status(http.StatusForbidden), "%s: no 403", name)
			}
			var idem *openapi3.Parameter
			for _, p := range op.Parameters {
				if p.Value.In == "header" && p.Value.Name == "Idempotency-Key" {
					idem = p.Value
				}
			}
			if method != http.MethodPost {
				require.Nil(t, idem, "%s is not mutating", name)
				continue
			}
			require.NotNil(t, idem, "%s: no Idempotency-Key parameter", name)
			require.True(t, idem.Required, "%s: Idempotency-Key not required", name)
			for _, code := range []int{400, 409, 422} {
				require.NotNil(t, op.Responses.Status(code), "%s: no %d", name, code)
			}
			require.NotNil(t, op.Responses.Status(http.StatusConflict).Value.Headers["Retry-After"], "%s: 409 without Retry-After", name)
			for code, r := range op.Responses.Map() {
				if code < "500" {
					require.NotNil(t, r.Value.Headers["Idempotent-Replayed"], "%s %s: no Idempotent-Replayed", name, code)
				}
			}
		}
	}
	require.Equal(t, 74, n, "operations in openapi.json")
}

// The SPEC's resource fields and enumerations, checked against the
// document so that a field dropped by an edit is noticed.
func TestSchemasHaveTheSpecFields(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.Document()
	require.NoError(t, err)
	required := map[string][]string{
		"Deposit": {"deposit_id", "external_user_id", "asset", "status", "address", "checkout_link", "expires_at",
			"address_reserved_until", "amount_expected", "amount_credited", "created_at", "payments"},
		"DepositPayment": {"payment_id", "amount", "credited", "credited_at", "after_expiration", "resolved_by"},
		"Withdrawal": {"withdrawal_id", "external_user_id", "asset", "status", "destination_address", "amount_gross",
			"fee", "amount_net", "approval_mode", "txid", "failure_reason", "created_at", "updated_at"},
		"AdminWithdrawal": {"withdrawal_id", "approved_by", "rejected_by", "released_by", "release_attestation", "backend_ref"},
		"Asset": {"asset", "display_name", "decimals", "unit_name", "enabled", "withdrawal_min", "withdrawal_auto_limit",
			"withdrawal_daily_cap", "withdrawal_flat_fee"},
		"Balance":          {"asset", "available", "held", "total"},
		"BalancesResponse": {"external_user_id", "balances"},
		"LedgerTransaction": {"posting_id", "entry_id", "kind", "asset", "account", "amount", "direction", "source_ref",
			"memo", "created_at"},
		"AddressHistory": {"address", "reservations"},
		"Reservation":    {"deposit_id", "external_user_id", "status", "reserved_from", "reserved_until"},
		"OutboundEvent": {"id", "raw_id", "type", "status", "attempts", "next_attempt_at", "last_error", "created_at",
			"payload"},
		"WalletAlert": {"id", "asset", "txid", "amount", "confirmations", "detected_at", "note"},
		"ReconciliationReport": {"healthy", "ledger_consistent", "materialized_vs_derived_drifts", "unbalanced_entries",
			"alerts", "custody"},
		"CustodyLine": {"asset", "ledger_custody", "ledger_in_flight", "user_obligations", "chain_balance", "chain_source",
			"expected_shortfall", "difference", "insolvent"},
		"Health":          {"status", "database", "version"},
		"Readiness":       {"status", "components"},
		"Component":       {"name", "status", "detail"},
		"WebhookAck":      {"status"},
		"DepositList":     {"deposits", "next_cursor"},
		"WithdrawalList":  {"withdrawals", "next_cursor"},
		"TransactionList": {"transactions", "next_cursor"},
		"AssetList":       {"assets"},
		"ResolveResult":   {"deposit", "credited"},
		"RedeliverResult": {"id", "status"},
		// The Events API: the webhook body, and a page of them.
		"OutboundEventPayload": {"id", "type", "created_at", "data"},
		"EventPage":            {"events", "next_cursor"},
		// Beyond the SPEC: the operator audit trail.
		"AuditEntry": {"id", "at", "actor", "actor_label", "action", "target", "request_digest", "detail"},
		"AuditList":  {"entries", "next_cursor"},

		// Beyond the SPEC: the proof of liabilities (docs/provable-custody.md).
		"LiabilitiesProof":     {"version", "asset", "snapshot_id", "snapshot_at", "external_user_id", "salt", "leaf", "path", "root"},
		"LiabilitiesProofLeaf": {"id_hash", "balance", "hash"},
		"LiabilitiesProofStep": {"side", "hash", "sum"},
		"LiabilitiesProofRoot": {"hash", "total"},
		"LiabilitiesSnapshot":  {"asset", "snapshot_id", "snapshot_at", "trigger", "users", "root", "total", "total_units"},
		"Transfer":             {"transfer_id", "status", "legs", "description", "metadata", "client_reference", "created_at"},
	}
	for name, fields := range required {
		s := doc.Components.Schemas[name]
		require.NotNil(t, s, name)
		for _, f := range fields {
			require.Contains(t, s.Value.Required, f, "%s.%s", name, f)
			require.Contains(t, s.Value.Properties, f, "%s.%s", name, f)
		}
	}
	created := doc.Components.Schemas["WithdrawalCreated"].Value
	require.Contains(t, created.Properties, "approval_reason")
	require.NotContains(t, created.Required, "approval_reason", "the SPEC makes approval_reason not required")

	enum := func(schema, prop string) []any {
		s := doc.Components.Schemas[schema].Value
		if prop != "" {
			s = s.Properties[prop].Value
		}
		return s.Enum
	}
	require.ElementsMatch(t, []any{"deposit_credit", "withdrawal_hold", "withdrawal_release", "payout_broadcast",
		"payout_settle", "correction", "transfer", "escrow_hold", "escrow_capture", "escrow_release"}, enum("LedgerTransaction", "kind"))
	require.ElementsMatch(t, []any{"creating", "pending", "confirming", "settled", "expired", "review", "dismissed",
		"failed"}, enum("DepositStatus", ""))
	require.ElementsMatch(t, []any{"requested", "pending_approval", "approved", "rejected", "submitting", "submitted",
		"broadcast", "confirmed", "failed", "refunded"}, enum("WithdrawalStatus", ""))
	require.ElementsMatch(t, []any{"deposit.detected", "deposit.settled", "deposit.review_required", "deposit.expired",
		"withdrawal.pending_approval", "withdrawal.broadcast", "withdrawal.completed", "withdrawal.failed",
		"transfer.completed", "hold.captured", "hold.voided", "hold.expired"}, enum("EventType", ""))
	desc := doc.Components.Schemas["LedgerTransaction"].Value.Properties["kind"].Value.Description
	for _, k := range enum("LedgerTransaction", "kind") {
		require.Contains(t, desc, "`"+k.(string)+"`", "kind %s is not described", k)
	}
}

// kin-openapi validates 3.0's `example` but not the `examples` keyword of a
// 3.1 schema, and the interactive view shows them: check each against its
// own schema.
func TestSchemaExamplesMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.Document()
	require.NoError(t, err)
	seen := map[*openapi3.Schema]bool{}
	checked := 0
	var walk func(name string, ref *openapi3.SchemaRef)
	walk = func(name string, ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		for _, ex := range s.Examples {
			require.NoError(t, s.VisitJSON(ex, openapi3.EnableJSONSchema2020()), "%s: example %v", name, ex)
			checked++
		}
		for p, ps := range s.Properties {
			walk(name+"."+p, ps)
		}
		walk(name+"[]", s.Items)
	}
	for name, s := range doc.Components.Schemas {
		walk(name, s)
	}
	require.Greater(t, checked, 5)
	bad := openapi3.NewSchema()
	bad.Pattern = "^[0-9]+$"
	require.Error(t, bad.VisitJSON("-x", openapi3.EnableJSONSchema2020()), "the check must be able to fail")
}
