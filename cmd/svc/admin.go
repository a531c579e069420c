package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/platform/timefmt"
)

func newAdminCmd() *cobra.Command {
	c := &cobra.Command{Use: "admin", Short: "Operator commands: keys, assets, ledger, events, deposits, withdrawals, alerts, audit, reconciliation, liabilities, the River UI, the console"}
	c.PersistentFlags().Bool("json", false, "print JSON instead of a table")
	c.AddCommand(newKeysCmd(), newAssetsCmd())
	for _, sub := range []*cobra.Command{adminLedgerCmd(), adminEventsCmd(), adminWebhookEndpointsCmd(), adminAlertsCmd(), adminDepositsCmd(), adminWithdrawalsCmd(), adminWalletAlertsCmd(), adminAuditCmd(), adminOperatorsCmd(), adminReconciliationCmd(), adminLiabilitiesCmd(), adminUICmd(), adminConsoleCmd()} {
		if sub != nil {
			c.AddCommand(sub)
		}
	}
	return c
}

// requireKey fails at once, before any work, when the operator's key
// (--key, else $SVC_OPERATOR_KEY) is missing or unreadable: the commands
// that call it always sign.
func requireKey(path string) error {
	_, err := loadKey(path)
	return err
}

// signedBy names the operator whose key signed env as the audit trail
// does ("op:NAME"), or the key's id when the roster cannot say.
func signedBy(ctx context.Context, a *app.App, env *operator.Envelope) string {
	st, err := env.Parse()
	if err != nil {
		return "?"
	}
	r, err := a.Operators.Roster(ctx, a.DB.Bun)
	if err != nil || r.Keys[st.KeyID] == nil {
		return st.KeyID
	}
	return "op:" + r.Keys[st.KeyID].Operator
}

func newKeysCmd() *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "Mint, list and revoke API keys"}
	var scope, label, mintKey, revokeKey string
	var expiresIn time.Duration
	var allowCIDRs []string
	mint := &cobra.Command{
		Use:   "mint --scope read_only|readwrite|admin --label TEXT [--expires-in 720h] [--allow-cidr CIDR]... --key FILE",
		Short: "Mint an API key, signed by an admin; it is printed once, alone on the last line",
		Long: `Mint an API key; it is printed once, alone on the last line.

The mint is signed with an enrolled admin's key (--key, default $SVC_OPERATOR_KEY): the statement
names the label, the scope, the deployment's key mode, the lifetime and the allowed networks. It is
recorded in the audit trail as made by "op:NAME", with the scope, label, mode, expiry and allowed
networks, never the key.

Scopes: read_only reads (GET) the platform routes and nothing else; readwrite calls every platform
route; admin those and /v1/admin. --allow-cidr (repeatable) restricts where the key is accepted
from: a CIDR (10.0.0.0/8, 2001:db8::/32) or an address; the client's address is the TCP peer's, or
the one a proxy of TRUSTED_PROXIES forwarded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := apikey.ParseScope(scope)
			if err != nil {
				return fmt.Errorf("--scope: %w", err)
			}
			nets, err := apikey.ParseNetworks(allowCIDRs)
			if err != nil {
				return fmt.Errorf("--allow-cidr: %w", err)
			}
			if err := requireKey(mintKey); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				env, err := signWith(mintKey, apikey.MintExpect(label, s, a.Keys.Mode, expiresIn, nets...))
				if err != nil {
					return err
				}
				k, plain, err := a.Keys.Mint(cmd.Context(), apikey.MintParams{Scope: s, Label: label, ExpiresIn: expiresIn, AllowedCIDRs: nets, Signature: env})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "minted %s (scope %s, label %q, expires %s, allowed from %s) by %s; store the key now, it is not shown again:\n", k.ID, k.Scope, k.Label,
					orDash(k.ExpiresAt), networks(k), signedBy(cmd.Context(), a, env))
				fmt.Fprintln(out, plain)
				return nil
			})
		},
	}
	mint.Flags().StringVar(&scope, "scope", "", "read_only (reads the platform routes), readwrite (platform backend) or admin (operators)")
	mint.Flags().StringArrayVar(&allowCIDRs, "allow-cidr", nil, "a client network the key is accepted from (CIDR or address; repeatable); none: anywhere")
	mint.Flags().StringVar(&label, "label", "", "who or what the key is for")
	mint.Flags().DurationVar(&expiresIn, "expires-in", 0, "lifetime, e.g. 720h; 0 never expires")
	keyFlag(mint, &mintKey)
	_ = mint.MarkFlagRequired("scope")
	_ = mint.MarkFlagRequired("label")

	list := &cobra.Command{
		Use: "list", Short: "List keys (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				ks, err := a.Keys.List(cmd.Context())
				if err != nil {
					return err
				}
				return showTable(cmd, "", "ID\tSCOPE\tMODE\tLABEL\tCREATED\tEXPIRES\tREVOKED\tLAST USED\tALLOWED FROM", ks, func(tw io.Writer, k apikey.Key) {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Scope, k.Mode, k.Label,
						timefmt.Format(k.CreatedAt), orDash(k.ExpiresAt), orDash(k.RevokedAt), orDash(k.LastUsedAt), networks(k))
				})
			})
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ID --key FILE", Short: "Revoke a key at once, signed by an admin (recorded in the audit trail as op:NAME)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireKey(revokeKey); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				env, err := signWith(revokeKey, apikey.RevokeExpect(args[0]))
				if err != nil {
					return err
				}
				k, err := a.Keys.RevokeSigned(cmd.Context(), args[0], audit.Actor{}, env)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %s at %s by %s\n", k.ID, orDash(k.RevokedAt), signedBy(cmd.Context(), a, env))
				return nil
			})
		},
	}
	keyFlag(revoke, &revokeKey)
	keys.AddCommand(mint, list, revoke)
	return keys
}

// networks shows a key's allowed networks, or "anywhere".
func networks(k apikey.Key) string {
	if len(k.AllowedCIDRs) == 0 {
		return "anywhere"
	}
	return strings.Join(k.AllowedCIDRs, ",")
}

// optionalLimit shows an optional setting in display units, or "off".
func optionalLimit(a asset.Asset, v *int64) string {
	if v == nil {
		return "off"
	}
	return a.Format(*v)
}

func newAssetsCmd() *cobra.Command {
	assets := &cobra.Command{Use: "assets", Short: "List assets and change their withdrawal limits"}
	list := &cobra.Command{
		Use: "list", Short: "List every asset with its limits (display units)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				all, err := a.Assets.All(cmd.Context())
				if err != nil {
					return err
				}
				return show(cmd, viewsOf(all, asset.ToView), func(out io.Writer) error {
					return printTable(out, "", "ASSET\tENABLED\tDECIMALS\tMIN\tAUTO LIMIT\tDAILY CAP\tFLAT FEE\tUSER DAILY CAP\tFOUR-EYES ABOVE", all, func(tw io.Writer, x asset.Asset) {
						v := asset.ToView(x)
						fmt.Fprintf(tw, "%s\t%v\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Asset, v.Enabled, v.Decimals, v.WithdrawalMin, v.WithdrawalAutoLimit, v.WithdrawalDailyCap, v.WithdrawalFlatFee,
							optionalLimit(x, x.WithdrawalUserDailyCap), optionalLimit(x, x.WithdrawalFourEyesThreshold))
					})
				})
			})
		},
	}
	var minS, autoS, capS, feeS, userCapS, fourEyesS, key string
	set := &cobra.Command{
		Use:   "set ASSET [--withdrawal-min N] [--withdrawal-auto-limit N] [--withdrawal-daily-cap N] [--withdrawal-flat-fee N] [--withdrawal-user-daily-cap N|off] [--four-eyes-threshold N|off] --key FILE",
		Short: "Change an asset's withdrawal limits; every flag takes an integer in the asset's SMALLEST unit (sat for BTC, micro-USDT for USDT_TRC20)",
		Long: `Change an asset's withdrawal limits at run time (GET /v1/assets shows them at once).

Every amount is an integer in the asset's smallest unit (sat for BTC and BTC_LN, micro-USDT for
USDT_TRC20). The two optional settings also take "off":

  --withdrawal-user-daily-cap  a user's rolling 24-hour total of the asset above which their
                               withdrawals wait for an operator (off by default)
  --four-eyes-threshold        a gross amount above which approving a withdrawal needs two
                               different operators (off by default)

The change is signed with an enrolled admin's key (--key, default $SVC_OPERATOR_KEY): the statement
names the asset and each limit being set with its new value in display units (or off). It is
recorded in the audit trail as made by "op:NAME".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var l asset.Limits
			for _, f := range []struct{ flag, val, setting string }{{"withdrawal-min", minS, "withdrawal_min"},
				{"withdrawal-auto-limit", autoS, "withdrawal_auto_limit"}, {"withdrawal-daily-cap", capS, "withdrawal_daily_cap"},
				{"withdrawal-flat-fee", feeS, "withdrawal_flat_fee"}, {"withdrawal-user-daily-cap", userCapS, "withdrawal_user_daily_cap"},
				{"four-eyes-threshold", fourEyesS, "withdrawal_four_eyes_threshold"}} {
				if !cmd.Flags().Changed(f.flag) {
					continue
				}
				if err := l.Set(f.setting, f.val); err != nil {
					if asset.OptionalSetting(f.setting) {
						return fmt.Errorf("--%s %q: %w (smallest units, or off)", f.flag, f.val, err)
					}
					return fmt.Errorf("--%s %q: %w (smallest units, e.g. 10000 for 0.0001 BTC)", f.flag, f.val, err)
				}
			}
			if l.IsZero() {
				return fmt.Errorf("nothing to change: give at least one limit flag")
			}
			if err := requireKey(key); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				cur, err := a.Assets.Get(cmd.Context(), args[0])
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				env, err := signWith(key, asset.SetLimitsExpect(cur, l))
				if err != nil {
					return err
				}
				x, err := a.Assets.SetLimitsSigned(cmd.Context(), args[0], l, audit.Actor{}, env)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				v := asset.ToView(x)
				fmt.Fprintf(cmd.OutOrStdout(), "%s: min %s, auto limit %s, daily cap %s, flat fee %s, user daily cap %s, four-eyes threshold %s (display units)\n",
					v.Asset, v.WithdrawalMin, v.WithdrawalAutoLimit, v.WithdrawalDailyCap, v.WithdrawalFlatFee, optionalLimit(x, x.WithdrawalUserDailyCap), optionalLimit(x, x.WithdrawalFourEyesThreshold))
				return nil
			})
		},
	}
	set.Flags().StringVar(&minS, "withdrawal-min", "", "smallest withdrawal, in smallest units")
	set.Flags().StringVar(&autoS, "withdrawal-auto-limit", "", "largest withdrawal approved without an operator, in smallest units")
	set.Flags().StringVar(&capS, "withdrawal-daily-cap", "", "rolling 24-hour total beyond which everything needs an operator, in smallest units")
	set.Flags().StringVar(&feeS, "withdrawal-flat-fee", "", "flat service fee, in smallest units")
	set.Flags().StringVar(&userCapS, "withdrawal-user-daily-cap", "", "per-user rolling 24-hour total beyond which the user's withdrawals need an operator, in smallest units, or off")
	set.Flags().StringVar(&fourEyesS, "four-eyes-threshold", "", "gross above which approval needs two different operators, in smallest units, or off")
	keyFlag(set, &key)
	assets.AddCommand(list, set)
	return assets
}
