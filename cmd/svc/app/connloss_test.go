package app_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
)

// TestConnectionLossIs503: when PostgreSQL drops the service's connections
// under requests in flight (a restart, a failover), those requests answer
// 503, which a client retries with the same key, never 500; the service
// recovers on its own.
func TestConnectionLossIs503(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	var name string
	require.NoError(t, e.App.DB.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		bodies   []string
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := e.Get(fmt.Sprint("/v1/users/loss-", g, "-", i, "/transactions"))
				mu.Lock()
				statuses[r.Status]++
				if r.Status == http.StatusInternalServerError {
					bodies = append(bodies, string(r.Body))
				}
				mu.Unlock()
			}
		}(g)
	}
	killer, err := pgx.Connect(ctx, e.DBURL)
	require.NoError(t, err)
	defer killer.Close(ctx)
	for round := 0; round < 10; round++ {
		time.Sleep(30 * time.Millisecond)
		// The service's own sessions: a superuser's (an autovacuum worker,
		// another test's setup) cannot be ended by this role.
		_, err := killer.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = $1 AND pid <> pg_backend_pid() AND usename = current_user`, name)
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	t.Logf("statuses: %v", statuses)
	require.Zero(t, statuses[http.StatusInternalServerError], "no 500: %v", bodies)
	require.NotZero(t, statuses[http.StatusServiceUnavailable], "the service's connections were dropped under requests")
	apptest.Eventually(t, 10*time.Second, func() bool { return e.Get("/v1/assets").Status == http.StatusOK }, "recovery")
}
