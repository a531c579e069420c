package event_test

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/modules/event/eventtest"
	"svc/platform/db"
)

func TestEmitWritesTheEventAndItsJobInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	data := event.DepositSettledData{DepositID: "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b", ExternalUserID: ptr("user-1"),
		Asset: "BTC", Status: "settled", AmountCredited: "0.00012345"}

	var e event.Event
	err := db.RunInTx(ctx, b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
		var err error
		e, err = b.events.Emit(ctx, tx, event.DepositSettled, data)
		require.NoError(t, err)
		j := rivertest.RequireInsertedTx[*riverdatabasesql.Driver](ctx, t, tx.Tx, event.DeliverArgs{}, nil)
		require.Equal(t, event.DeliverArgs{EventID: e.ID, Attempt: 1}, j.Args)
		// Not visible outside the transaction before it commits.
		require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events"))
		return nil
	})
	require.NoError(t, err)

	got := b.get(t, e.ID)
	require.Equal(t, event.StatusPending, got.Status)
	require.Zero(t, got.Attempts)
	require.Nil(t, got.LastError)
	require.True(t, got.CreatedAt.Equal(b.fake.Now().Truncate(time.Microsecond)))
	require.True(t, got.NextAttemptAt.Equal(got.CreatedAt), "due at once")
	require.Regexp(t, `^evt_[0-9a-f]{32}$`, got.PublicID())
	require.Equal(t, "evt_"+strings.ReplaceAll(e.ID.String(), "-", ""), got.PublicID())

	// The payload is exactly {id, type, created_at, data}, in that order.
	want := `{"id":"` + e.PublicID() + `","type":"deposit.settled","created_at":"2026-05-04T10:00:00.123456+00:00",` +
		`"data":{"deposit_id":"0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b","external_user_id":"user-1","platform_account":null,"asset":"BTC","status":"settled","amount_credited":"0.00012345",` +
		`"metadata":{},"client_reference":null}}`
	require.Equal(t, want, string(got.Payload))
	require.Equal(t, want, string(e.Payload))
	eventtest.RequireValid(t, got.Payload)

	jobs := deliveryJobs(t, b.db.Bun, e.ID)
	require.Len(t, jobs, 1)
	require.Equal(t, "available", jobs[0].State)
}

func TestEmitRolledBackLeavesNoEventAndNoJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	boom := errors.New("the state change failed")
	err := db.RunInTx(context.Background(), b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
		for _, d := range samples() {
			if _, err := b.events.Emit(ctx, tx, d.Type(), d); err != nil {
				return err
			}
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events"))
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM river_job WHERE kind = 'event_deliver'"))
}

// EmitAll writes every event in one statement, in the order given, each
// exactly as Emit writes it and with its own delivery job; a rollback
// leaves none of them, and data that does not fit writes nothing.
func TestEmitAllWritesEachEventAsEmitDoes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var es []event.Emission
	for _, d := range samples() {
		es = append(es, event.Emission{Type: d.Type(), Data: d})
	}
	var got []event.Event
	require.NoError(t, db.RunInTx(ctx, b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
		var err error
		got, err = b.events.EmitAll(ctx, tx, es...)
		return err
	}))
	require.Len(t, got, len(es))
	for i, e := range got {
		require.Equal(t, es[i].Type, e.Type)
		row := b.get(t, e.ID)
		require.Equal(t, string(e.Payload), string(row.Payload))
		require.Equal(t, event.StatusPending, row.Status)
		require.True(t, row.NextAttemptAt.Equal(row.CreatedAt), "due at once")
		eventtest.RequireValid(t, row.Payload)
		require.Len(t, deliveryJobs(t, b.db.Bun, e.ID), 1, "each event has its delivery")
	}

	boom := errors.New("the state change failed")
	before := countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events")
	err := db.RunInTx(ctx, b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
		if _, err := b.events.EmitAll(ctx, tx, es...); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	_, err = b.events.EmitAll(ctx, bun.Tx{}, event.Emission{Type: event.DepositSettled, Data: event.DepositDetectedData{}})
	require.Error(t, err, "data of another type is refused before anything is written")
	require.Equal(t, before, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events"))
}

func TestEmitRefusesDataThatDoesNotFit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := event.DepositSettledData{DepositID: "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b", ExternalUserID: ptr("u"), Asset: "BTC", Status: "settled", AmountCredited: "1"}
	for _, tc := range []struct {
		name string
		typ  event.Type
		data any
	}{
		{"WrongStruct", event.DepositSettled, event.DepositExpiredData{DepositID: good.DepositID, ExternalUserID: ptr("u"), Asset: "BTC", Status: "expired"}},
		{"UnknownType", event.Type("deposit.exploded"), good},
		{"NotData", event.DepositSettled, map[string]any{"deposit_id": good.DepositID}},
		{"Nil", event.DepositSettled, nil},
		{"NilPointer", event.DepositSettled, (*event.DepositSettledData)(nil)},
		{"NumberishAmount", event.DepositSettled, func() any { d := good; d.AmountCredited = "1e-8"; return d }()},
		{"NegativeAmount", event.DepositSettled, func() any { d := good; d.AmountCredited = "-1"; return d }()},
		{"EmptyAmount", event.DepositSettled, func() any { d := good; d.AmountCredited = ""; return d }()},
		{"DepositIDNotUUID", event.DepositSettled, func() any { d := good; d.DepositID = "dep-1"; return d }()},
		{"UnknownAsset", event.DepositSettled, func() any { d := good; d.Asset = "ETH"; return d }()},
		{"UnknownStatus", event.DepositSettled, func() any { d := good; d.Status = "done"; return d }()},
		{"NoUser", event.DepositSettled, func() any { d := good; d.ExternalUserID = nil; return d }()},
		{"EmptyUser", event.DepositSettled, func() any { d := good; d.ExternalUserID = ptr(""); return d }()},
		{"UserAndPlatform", event.DepositSettled, func() any { d := good; d.PlatformAccount = ptr("revenue"); return d }()},
		{"BadPlatformName", event.DepositSettled, func() any { d := good; d.ExternalUserID, d.PlatformAccount = nil, ptr("Revenue"); return d }()},
		{"NoApprovalReason", event.WithdrawalPendingApproval, event.WithdrawalPendingApprovalData{WithdrawalID: "w", ExternalUserID: ptr("u"), Asset: "BTC", Status: "pending_approval", AmountGross: "1"}},
		{"NoTxid", event.WithdrawalBroadcast, event.WithdrawalBroadcastData{WithdrawalID: "w", ExternalUserID: ptr("u"), Asset: "BTC", Status: "broadcast", AmountGross: "1", Fee: "0", AmountNet: "1"}},
		{"EmptyOptionalTxid", event.WithdrawalCompleted, event.WithdrawalCompletedData{WithdrawalID: "w", ExternalUserID: ptr("u"), Asset: "BTC", Status: "confirmed", AmountGross: "1", Fee: "0", AmountNet: "1", Txid: ptr("")}},
		{"NoFailureReason", event.WithdrawalFailed, event.WithdrawalFailedData{WithdrawalID: "w", ExternalUserID: ptr("u"), Asset: "BTC", Status: "failed", AmountGross: "1"}},
	} {
		err := db.RunInTx(context.Background(), b.db.Bun, func(ctx context.Context, tx bun.Tx) error {
			_, err := b.events.Emit(ctx, tx, tc.typ, tc.data)
			return err
		})
		require.ErrorIs(t, err, event.ErrData, tc.name)
	}
	require.Equal(t, 0, countRows(t, b.db.Bun, "SELECT count(*) FROM outbound_events"))

	// A pointer to the right struct is fine.
	e := b.emit(t, event.DepositSettled, &good)
	require.Equal(t, event.DepositSettled, e.Type)
}

func TestEveryTypeFitsThePublishedSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seen := map[event.Type]bool{}
	for _, d := range samples() {
		e := b.emit(t, d.Type(), d)
		eventtest.RequireValid(t, e.Payload)
		seen[d.Type()] = true
	}
	require.Len(t, seen, len(event.Types()), "a sample for every type")
	require.Equal(t, len(samples()), eventtest.RequireAllValid(t, b.db.Bun))

	// The schema is strict enough to catch drift.
	valid := string(b.emit(t, event.DepositSettled, samples()[1]).Payload)
	for name, bad := range map[string]string{
		"AmountAsNumber": strings.Replace(valid, `"amount_credited":"0.00012345"`, `"amount_credited":0.00012345`, 1),
		"ZTimestamp":     strings.Replace(valid, `+00:00"`, `Z"`, 1),
		"UnknownType":    strings.Replace(valid, `"deposit.settled"`, `"deposit.exploded"`, 1),
		"ExtraField":     strings.Replace(valid, `"status":"settled"`, `"status":"settled","extra":1`, 1),
		"MissingField":   strings.Replace(valid, `"asset":"BTC",`, ``, 1),
		"OtherTypesData": strings.Replace(valid, `"deposit.settled"`, `"deposit.expired"`, 1),
		"BadID":          strings.Replace(valid, `"evt_`, `"ev_`, 1),
	} {
		require.NotEqual(t, valid, bad, name)
		require.Error(t, eventtest.Validate(t, []byte(bad)), name)
	}
}

// TestSchemaDescribesTheDataStructs keeps docs/events.schema.json and the Go
// structs from drifting apart: same types, same fields, all required, and
// nullable exactly where the struct has a pointer.
func TestSchemaDescribesTheDataStructs(t *testing.T) {
	t.Parallel()
	_, doc := eventtest.Schema(t)
	require.Equal(t, event.SchemaVersion, doc["version"])

	enum := doc["properties"].(map[string]any)["type"].(map[string]any)["enum"].([]any)
	var types []string
	for _, v := range enum {
		types = append(types, v.(string))
	}
	var want []string
	for _, typ := range event.Types() {
		want = append(want, string(typ))
	}
	// and the ping a webhook endpoint's test sends (not an outbox event).
	want = append(want, string(event.TypePing))
	require.Equal(t, want, types)
	require.Len(t, doc["oneOf"], len(want))

	defs := doc["$defs"].(map[string]any)
	for _, typ := range event.Types() {
		name := strings.ReplaceAll(string(typ), ".", "_")
		variant := defs[name].(map[string]any)
		require.Equal(t, string(typ), variant["properties"].(map[string]any)["type"].(map[string]any)["const"])
		schema := defs[name+"_data"].(map[string]any)
		props := schema["properties"].(map[string]any)
		var required []string
		for _, r := range schema["required"].([]any) {
			required = append(required, r.(string))
		}
		require.Equal(t, false, schema["additionalProperties"], typ)

		rt := reflect.TypeOf(event.DataFor(typ))
		var fields []string
		for i := range rt.NumField() {
			f := rt.Field(i)
			tag := f.Tag.Get("json")
			fields = append(fields, tag)
			p, ok := props[tag].(map[string]any)
			require.True(t, ok, "%s: field %s is not in the schema", typ, tag)
			ref := p["$ref"].(string)
			nullable := strings.Contains(ref, "nullable")
			require.Equal(t, f.Type.Kind() == reflect.Pointer, nullable, "%s.%s: nullable in Go and in the schema", typ, tag)
		}
		sort.Strings(fields)
		sort.Strings(required)
		require.Equal(t, fields, required, "%s: every field is required", typ)
		require.Len(t, props, len(fields), "%s: no field only in the schema", typ)
	}
	// deposit.settled is fixed by the SPEC; version 1.2.0 added the
	// resource's labels to every deposit and withdrawal event, and 1.3.0 its
	// platform_account (external_user_id is null for a platform account's).
	settled := defs["deposit_settled_data"].(map[string]any)["required"].([]any)
	require.ElementsMatch(t, []any{"deposit_id", "external_user_id", "asset", "status", "amount_credited",
		"metadata", "client_reference", "platform_account"}, settled)
}

func TestPublicIDRoundTrip(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b")
	require.Equal(t, "evt_0190a6b2c3d47e8f9a0b1c2d3e4f5a6b", event.PublicID(id))
	for _, s := range []string{"evt_0190a6b2c3d47e8f9a0b1c2d3e4f5a6b", "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b"} {
		got, err := event.ParseID(s)
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
	for _, s := range []string{"", "evt_", "evt_0190", "evt_zz90a6b2c3d47e8f9a0b1c2d3e4f5a6b", "not-a-uuid"} {
		_, err := event.ParseID(s)
		require.Error(t, err, s)
	}
}

func TestRetryDelayIsTheSpecSchedule(t *testing.T) {
	t.Parallel()
	spec := []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour,
		12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour}
	var total time.Duration
	for i, d := range spec {
		require.Equal(t, d, event.RetryDelay(i+1), "after failed attempt %d", i+1)
		if i < event.MaxAttempts-1 {
			total += d
		}
	}
	require.Equal(t, 10, event.MaxAttempts)
	// Ten attempts span 56 h 36 min: "about three days" in the SPEC.
	require.Equal(t, 56*time.Hour+36*time.Minute, total)
}

func TestEventsAreNeverDeletedAndWhatWasSentNeverChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.emit(t, event.DepositExpired, samples()[4])
	ctx := context.Background()
	for _, q := range []string{
		"DELETE FROM outbound_events",
		"UPDATE outbound_events SET payload = '{}'",
		"UPDATE outbound_events SET type = 'deposit.settled'",
		"UPDATE outbound_events SET created_at = now()",
	} {
		_, err := b.db.Bun.ExecContext(ctx, q)
		require.Error(t, err, q)
	}
	require.Equal(t, e.Payload, b.get(t, e.ID).Payload)
	_, err := b.db.Bun.ExecContext(ctx, "UPDATE outbound_events SET last_error = 'x'")
	require.NoError(t, err, "delivery state may change")
}
