package sdktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"svc/cmd/svc/clustertest"
	"svc/platform/dbtest"
)

const (
	processorSecret = "sdk-processor-secret"
	webhookSecret   = "sdk-webhook-secret"
)

// needNPM skips the test where npm is missing, except in CI.
func needNPM(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("npm is needed for the TypeScript client's checks")
		}
		t.Skip("npm is not installed: the client libraries are not checked")
	}
}

// run runs name args... in dir (absolute, or relative to the module root)
// with env added, and fails the test with its output when it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if !filepath.IsAbs(dir) {
		cmd.Dir = filepath.Join(dbtest.ModuleRoot(), dir)
	}
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, dir, err, out)
	}
	t.Logf("%s %v in %s: %s", name, args, dir, time.Since(start).Round(time.Millisecond))
	if testing.Verbose() {
		t.Logf("%s", out)
	}
}

// TestClientsAreGenerated fails when openapi.json changed and make sdk was
// not run: both clients are generated into a temporary folder and compared
// with the committed ones.
func TestClientsAreGenerated(t *testing.T) {
	needNPM(t)
	run(t, ".", []string{"GO=go"}, "scripts/sdk.sh", "check")
}

// TestClientsEndToEnd runs each client's tests against the service: the
// TypeScript one's (npm test) and the Go one's (go test ./sdk/go), with
// SVC_SDK_API_URL, a readwrite key, an admin key (each test adds a webhook
// endpoint of its own with it), the webhook secret, the port of the webhook
// receiver each test runs (PLATFORM_WEBHOOK_URL points there; the two run
// one after the other) and the simulator's control API.
func TestClientsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service as separate processes")
	}
	needNPM(t)
	run(t, ".", nil, "scripts/sdk.sh", "deps")
	env := start(t)
	t.Run("typescript", func(t *testing.T) { run(t, "sdk/typescript", env, "npm", "test") })
	t.Run("go", func(t *testing.T) {
		run(t, ".", env, "go", "test", "-count=1", "-run", "^TestEndToEnd$", "-v", "./sdk/go/")
	})
}

// start builds svc, starts the simulator, the api and the worker on a
// fresh database, mints a readwrite and an admin key, and returns what the clients'
// tests read.
func start(t *testing.T) []string {
	dir := t.TempDir()
	bin := clustertest.Build(t, dir)
	dbURL := dbtest.NewURL(t)
	simPort, apiPort, hookPort := dbtest.FreePort(t), dbtest.FreePort(t), dbtest.FreePort(t)
	simURL := fmt.Sprintf("http://127.0.0.1:%d", simPort)
	apiURL := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	simArgs := []string{"--addr", fmt.Sprintf("127.0.0.1:%d", simPort)}
	env := append(os.Environ(), "DATABASE_URL="+dbURL, "MIGRATE_DATABASE_URL="+dbtest.OwnerURL(dbURL),
		"SVC_ENV=development", "SVC_CONFIG_FILE=", "LOG_LEVEL=warn", "BITCOIN_NETWORK=regtest", "API_KEY_MODE=test",
		"HTTP_LISTEN_HOST=127.0.0.1", "PROCESSOR_WEBHOOK_SECRET="+processorSecret,
		fmt.Sprintf("PLATFORM_WEBHOOK_URL=http://127.0.0.1:%d/webhooks", hookPort), "PLATFORM_WEBHOOK_SECRET="+webhookSecret)
	env = append(env, clustertest.SimulatorEnv(t, bin, env, simArgs...)...)
	env = append(env, "SVC_OPERATOR_KEY="+clustertest.OperatorKey(t, dbURL, dir, "sdk"))
	key := clustertest.LastLine(clustertest.Run(t, bin, env, "admin", "keys", "mint", "--scope", "readwrite", "--label", "sdk tests"))
	// The clients' tests add their own webhook endpoints with it.
	adminKey := clustertest.LastLine(clustertest.Run(t, bin, env, "admin", "keys", "mint", "--scope", "admin", "--label", "sdk tests: webhook endpoints"))
	procs := []*clustertest.Proc{
		{Name: "simulator", Bin: bin, Env: env, Log: filepath.Join(dir, "simulator.log"), Ready: simURL + "/_sim/",
			Args: append(append([]string{"simulator"}, simArgs...), "--webhook-url", apiURL+"/webhooks/processor", "--webhook-secret", processorSecret)},
		{Name: "api", Bin: bin, Args: []string{"api"}, Log: filepath.Join(dir, "api.log"), Ready: apiURL + "/healthz",
			Env: append(append([]string(nil), env...), "PORT="+strconv.Itoa(apiPort))},
		{Name: "worker", Bin: bin, Args: []string{"worker"}, Log: filepath.Join(dir, "worker.log"), Env: env},
	}
	for _, p := range procs {
		if err := p.Start(); err != nil {
			t.Fatalf("start %s: %v", p.Name, err)
		}
		t.Cleanup(p.Stop)
		if err := p.WaitReady(30 * time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", p.Name, err, clustertest.Tail(p.Log))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s's log:\n%s", p.Name, clustertest.Tail(p.Log))
			}
		}
	})
	return []string{"SVC_SDK_API_URL=" + apiURL, "SVC_SDK_API_KEY=" + key, "SVC_SDK_ADMIN_KEY=" + adminKey, "SVC_SDK_WEBHOOK_SECRET=" + webhookSecret,
		"SVC_SDK_WEBHOOK_PORT=" + strconv.Itoa(hookPort), "SVC_SDK_SIMULATOR_URL=" + simURL}
}

// TestInstallFromCheckout: the README's way for an integrator's project to
// get each client from a checkout works. TypeScript: npm pack in
// sdk/typescript builds the package, and a project that installs the
// tarball imports it (and finds its types). Go: a module outside requires
// svc/sdk/go through a replace to the checkout and builds.
func TestInstallFromCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and installs the clients in projects of their own")
	}
	root := dbtest.ModuleRoot()
	t.Run("typescript", func(t *testing.T) {
		needNPM(t)
		run(t, ".", nil, "scripts/sdk.sh", "deps")
		app := t.TempDir()
		run(t, "sdk/typescript", nil, "npm", "pack", "--pack-destination", app)
		tgz := filepath.Join(app, "svc-client-0.3.0.tgz")
		if _, err := os.Stat(tgz); err != nil {
			t.Fatalf("npm pack: %v (the README names this file)", err)
		}
		write(t, filepath.Join(app, "package.json"), `{"name": "platform", "private": true, "type": "module"}`)
		write(t, filepath.Join(app, "main.js"), `import { createClient, verifyWebhook, withIdempotency } from "@svc/client";
for (const f of [createClient, verifyWebhook, withIdempotency]) if (typeof f !== "function") throw new Error("not exported");
createClient({ baseUrl: "http://localhost:8080", apiKey: "k" });
`)
		run(t, app, nil, "npm", "install", "--no-audit", "--no-fund", "--prefer-offline", tgz)
		run(t, app, nil, "node", "main.js")
		if _, err := os.Stat(filepath.Join(app, "node_modules/@svc/client/dist/src/index.d.ts")); err != nil {
			t.Errorf("the installed package has no types: %v", err)
		}
	})
	t.Run("go", func(t *testing.T) {
		app := t.TempDir()
		write(t, filepath.Join(app, "go.mod"), "module example.com/platform\n\ngo 1.26.0\n")
		write(t, filepath.Join(app, "main.go"), `package main

import svcsdk "svc/sdk/go"

func main() {
	if _, err := svcsdk.New("http://localhost:8080", "k", svcsdk.WithHTTPClient(&svcsdk.Retrying{})); err != nil {
		panic(err)
	}
}
`)
		rel, err := filepath.Rel(app, root)
		if err != nil {
			t.Fatal(err)
		}
		run(t, app, nil, "go", "mod", "edit", "-require=svc@v0.0.0", "-replace=svc="+rel)
		run(t, app, nil, "go", "mod", "tidy")
		run(t, app, nil, "go", "build", "-o", os.DevNull, ".")
	})
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
