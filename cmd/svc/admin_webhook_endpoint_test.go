package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/event"
)

func TestAdminWebhookEndpoints(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()

	out, err := run(t, "admin", "webhook-endpoints", "list")
	require.NoError(t, err, out)
	require.Contains(t, out, "no webhook endpoints")

	ep, evID := uuid.New(), uuid.New()
	_, err = d.Pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, url, events, secret_sealed, created_at, updated_at)
		VALUES ($1, 'https://platform.example/hooks', '{deposit.*}', '\xdeadbeef', now(), now())`, ep)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `INSERT INTO outbound_events (id, type, status, attempts, next_attempt_at, payload, created_at)
		VALUES ($1, 'deposit.expired', 'pending', 0, now(), '{}', now())`, evID)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'dead', attempts = 10, dead_at = now(), last_error = 'HTTP 500: down'
		WHERE event_id = $1`, evID)
	require.NoError(t, err)

	out, err = run(t, "admin", "webhook-endpoints", "list", "--json")
	require.NoError(t, err, out)
	var eps []event.EndpointRecord
	require.NoError(t, json.Unmarshal([]byte(out), &eps), out)
	require.Len(t, eps, 1)
	require.Equal(t, ep.String(), eps[0].ID)
	require.Equal(t, []string{"deposit.*"}, eps[0].Events)
	require.NotContains(t, out, "secret\"")

	out, err = run(t, "admin", "webhook-endpoints", "deliveries", "--status", "dead", "--json")
	require.NoError(t, err, out)
	var dead []event.DeliveryListItem
	require.NoError(t, json.Unmarshal([]byte(out), &dead), out)
	require.Len(t, dead, 1)
	require.Equal(t, event.PublicID(evID), dead[0].EventID)
	require.Equal(t, ep.String(), dead[0].EndpointID)
	require.Equal(t, "HTTP 500: down", *dead[0].LastError)
	out, err = run(t, "admin", "webhook-endpoints", "deliveries", "--status", "pending")
	require.NoError(t, err, out)
	require.Contains(t, out, "no deliveries")
	out, err = run(t, "admin", "webhook-endpoints", "deliveries", "--endpoint", ep.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "HTTP 500: down")

	_, err = run(t, "admin", "webhook-endpoints", "deliveries", "--status", "gone")
	require.ErrorContains(t, err, "want pending, delivered or dead")
	_, err = run(t, "admin", "webhook-endpoints", "deliveries", "--endpoint", "x")
	require.ErrorContains(t, err, "want an endpoint's id")
}
