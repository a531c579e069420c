package app_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"svc/cmd/svc/app/apptest"
	"svc/modules/ledger"
	"svc/platform/config"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkHistoryReplica: the first page of a user's history (50 of 400
// postings) through the API, read from a streaming standby
// (DATABASE_READ_URL) and, in the same run, from the primary (a second
// service on the same primary without DATABASE_READ_URL). With -count the
// two alternate. docs/performance.md ("Reads from a replica").
func BenchmarkHistoryReplica(b *testing.B) {
	primary := dbtest.StartReplicatedServer(b)
	standby := primary.StartStandby(dbtest.StandbyOptions{Name: "bench"})
	b.Setenv("DATABASE_URL", primary.URL)
	withReplica := apptest.New(b, apptest.WithConfig(func(c *config.Config) {
		u, err := url.Parse(c.Database.URL)
		if err != nil {
			b.Fatal(err)
		}
		u.Host = "127.0.0.1:" + standby.Port()
		c.Database.ReadURL = u.String()
	}))
	alone := apptest.New(b)
	ctx := context.Background()
	for _, e := range []*apptest.Env{withReplica, alone} {
		for i := range 400 {
			if _, err := ledger.CreditDeposit(ctx, e.App.DB.Bun, "BTC", ledger.UserHolder("hist"), 1_000, fmt.Sprintf("deposit:bench:%d", i), "bench"); err != nil {
				b.Fatal(err)
			}
		}
	}
	primary.WaitStreaming("bench", false) // every credit replayed
	apptest.Eventually(b, 60*time.Second, func() bool {
		return withReplica.App.Replica.State().Status == db.ReplicaOK
	}, "the standby in use")
	for _, c := range []struct {
		name string
		e    *apptest.Env
	}{{"replica", withReplica}, {"primary", alone}} {
		b.Run(c.name, func(b *testing.B) {
			served := withReplica.App.Replica.Stats().Served
			for b.Loop() {
				if r := c.e.Get("/v1/users/hist/transactions"); r.Status != http.StatusOK {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
			if c.name == "replica" && withReplica.App.Replica.Stats().Served == served {
				b.Fatal("the replica served nothing")
			}
		})
	}
}
