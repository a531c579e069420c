package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/audit"
	"svc/modules/operator"
)

// adminOperatorsCmd is `svc admin operators`: the operators' keys, the
// first admin's enrollment, the changes of the roster an admin signs
// (enrolled by quorum: two admins once two exist), and the roster the
// enrollment chain proves.
func adminOperatorsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "operators",
		Short: "Operators: key files, enrollment by admins' signatures, roles and revocation; the roster the enrollment chain proves",
		Long: `Operators are the people who approve withdrawals, resolve deposits and change limits, keys and
operators. Each has a role (viewer, approver, admin) and one or more keys; who they are is what the
enrollment chain proves (operator_records: every change, signed by admins), never the operators
tables, which only mirror it.

Every change of the roster is signed with an admin's key file (--key, default $` + KeyEnv + `). While one
admin exists, their signature applies a change; once two exist, a change needs two different
admins: the first one's command leaves it pending, and another admin runs the same command with
their own key to apply it. docs/operations.md, "Operators".`,
	}
	c.AddCommand(operatorsKeygenCmd(), operatorsInitCmd(), operatorsEnrollCmd(), operatorsAddKeyCmd(), operatorsRevokeKeyCmd(),
		operatorsSetRoleCmd(), operatorsRevokeCmd(), operatorsListCmd())
	return c
}

// keygenResult is what keygen prints with --json.
type keygenResult struct {
	File      string `json:"file"`
	PublicKey string `json:"public_key"`
	KeyID     string `json:"key_id"`
}

func operatorsKeygenCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Write a new operator key file (Ed25519, mode 0600, never overwritten) and print its public key and key id",
		Long: `Writes a new Ed25519 private key to FILE (PKCS#8 PEM, readable by its owner only; an existing file
is never overwritten) and prints its public key (ed25519:...) and key id (opk_...). Keep the file
secret: whoever has it signs as you. Give the public key to an admin, who enrolls it (enroll, or
add-key for another key of yours); the first admin enrolls themselves with init. Needs no database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out FILE is required: where to write the private key")
			}
			pub, err := operator.GenerateKeyFile(out)
			if err != nil {
				return err
			}
			r := keygenResult{File: out, PublicKey: pub.String(), KeyID: pub.ID()}
			return show(cmd, r, func(w io.Writer) error {
				fmt.Fprintf(w, "wrote a new private key to %s (mode 0600): keep it secret, whoever has it signs as you\n", r.File)
				fmt.Fprintf(w, "public key: %s\nkey id:     %s\n", r.PublicKey, r.KeyID)
				return nil
			})
		},
	}
	c.Flags().StringVar(&out, "out", "", "the private key file to create")
	return c
}

func operatorsInitCmd() *cobra.Command {
	var name, keyPath string
	c := &cobra.Command{
		Use:   "init --name NAME --key FILE",
		Short: "Enroll the first admin, signed by their own key; only while no operator exists",
		Long: `Enrolls NAME as the first admin with the key of FILE (svc admin operators keygen), signed by that
key: the first record of the enrollment chain. It is refused once any operator is enrolled (every
later change is signed by admins).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			ch := operator.Change{Action: operator.ActionInit, Name: name, Role: operator.Admin, PublicKey: s.Public().String()}
			return submitChange(cmd, s, ch)
		},
	}
	c.Flags().StringVar(&name, "name", "", "the first admin's name (1 to 64 of a-z 0-9 _ . -)")
	keyFlag(c, &keyPath)
	_ = c.MarkFlagRequired("name")
	return c
}

func operatorsEnrollCmd() *cobra.Command {
	var name, role, pub, keyPath string
	c := &cobra.Command{
		Use:   "enroll --name NAME --role viewer|approver|admin --public-key PK --key FILE",
		Short: "Enroll an operator with a role and a public key (an admin signs; two admins once two exist)",
		Long: `Enrolls NAME with ROLE and the public key PK (the ed25519:... that their keygen printed), signed with
your admin key. Names are never reused, and a key belongs to one operator.` + quorumHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pk, err := normalKey(pub)
			if err != nil {
				return err
			}
			return signedChange(cmd, keyPath, operator.Change{Action: operator.ActionEnroll, Name: name, Role: operator.Role(role), PublicKey: pk})
		},
	}
	c.Flags().StringVar(&name, "name", "", "the operator's name (1 to 64 of a-z 0-9 _ . -)")
	c.Flags().StringVar(&role, "role", "", "viewer, approver or admin")
	c.Flags().StringVar(&pub, "public-key", "", "the operator's public key, ed25519:... (svc admin operators keygen prints it)")
	keyFlag(c, &keyPath)
	for _, f := range []string{"name", "role", "public-key"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func operatorsAddKeyCmd() *cobra.Command {
	var pub, keyPath string
	c := &cobra.Command{
		Use:   "add-key NAME --public-key PK --key FILE",
		Short: "Add another key to an operator (rotation: add the new key, then revoke-key the old one)",
		Long: `Adds the public key PK to operator NAME, signed with your admin key. To rotate a key, add the new
one, check that it signs, then revoke-key the old one.` + quorumHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pk, err := normalKey(pub)
			if err != nil {
				return err
			}
			return signedChange(cmd, keyPath, operator.Change{Action: operator.ActionAddKey, Name: args[0], PublicKey: pk})
		},
	}
	c.Flags().StringVar(&pub, "public-key", "", "the new public key, ed25519:...")
	keyFlag(c, &keyPath)
	_ = c.MarkFlagRequired("public-key")
	return c
}

func operatorsRevokeKeyCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:   "revoke-key NAME KEY_ID --key FILE",
		Short: "Revoke one key of an operator (a lost or rotated key); the last admin's last key stays",
		Long: `Revokes the key KEY_ID (opk_...) of operator NAME, signed with your admin key: nothing it signs is
accepted any more. The last active key of the last admin cannot be revoked (add another first).` + quorumHelp,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return signedChange(cmd, keyPath, operator.Change{Action: operator.ActionRevokeKey, Name: args[0], KeyID: args[1]})
		},
	}
	keyFlag(c, &keyPath)
	return c
}

func operatorsSetRoleCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:   "set-role NAME viewer|approver|admin --key FILE",
		Short: "Change an operator's role; the last admin stays an admin",
		Long:  `Gives operator NAME the role ROLE, signed with your admin key.` + quorumHelp,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return signedChange(cmd, keyPath, operator.Change{Action: operator.ActionSetRole, Name: args[0], Role: operator.Role(args[1])})
		},
	}
	keyFlag(c, &keyPath)
	return c
}

func operatorsRevokeCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:   "revoke NAME --key FILE",
		Short: "Revoke an operator and all their keys; the last admin cannot be revoked",
		Long: `Revokes operator NAME and every key of theirs, signed with your admin key: nothing they sign is
accepted any more, and their name is never given again. The last admin cannot be revoked (enroll
another admin first).` + quorumHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return signedChange(cmd, keyPath, operator.Change{Action: operator.ActionRevoke, Name: args[0]})
		},
	}
	keyFlag(c, &keyPath)
	return c
}

// quorumHelp ends the help of every change an admin signs.
const quorumHelp = `

Once two admins exist a change needs two different admins' signatures: the first run leaves it
pending ("pending: needs 1 more admin signature(s)"), and another admin runs the same command with
their own --key to apply it. A change is bound to the chain's head when it is signed: should
another change apply first, sign it again.`

// normalKey checks a public key and returns its text form.
func normalKey(s string) (string, error) {
	pk, err := operator.ParsePublicKey(s)
	if err != nil {
		return "", fmt.Errorf("--public-key: %w", err)
	}
	return pk.String(), nil
}

// signedChange signs c with the admin key of keyPath (--key, else
// $SVC_OPERATOR_KEY) on top of the chain's head and submits it.
func signedChange(cmd *cobra.Command, keyPath string, c operator.Change) error {
	s, err := loadKey(keyPath)
	if err != nil {
		return err
	}
	return submitChange(cmd, s, c)
}

// submitChange reads the chain's head, signs c's statement on top of it,
// now, with s, submits it and prints what it did.
func submitChange(cmd *cobra.Command, s *operator.Signer, c operator.Change) error {
	return withApp(cmd, func(a *app.App) error {
		ctx := cmd.Context()
		head, err := a.Operators.Head(ctx, a.DB.Bun)
		if err != nil {
			return err
		}
		env, err := s.Sign(c.Statement(head, time.Now()))
		if err != nil {
			return err
		}
		res, err := a.Operators.Submit(ctx, env)
		if err != nil {
			return err
		}
		return show(cmd, res, func(out io.Writer) error {
			what := res.Action + " " + res.Name
			if res.Status == "applied" {
				fmt.Fprintf(out, "%s: applied (record %d), signed by %s\n", what, *res.Seq, strings.Join(res.SignedBy, ", "))
				return nil
			}
			fmt.Fprintf(out, "%s: pending: needs %d more admin signature(s): another admin runs the same command (signed so far by %s)\n",
				what, res.ApprovalsNeeded, strings.Join(res.SignedBy, ", "))
			return nil
		})
	})
}

func operatorsListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "The operators the enrollment chain proves, with their keys; any discrepancy of the tables; pending changes",
		Long: `Lists the operators as the enrollment chain proves them (replayed, every signature verified), one
line per key, the chain's head and how many admins must sign a change now. A WARNING section lists
every row of the operators tables the chain does not prove (an operator or key inserted by hand: it
grants nothing) or a chain that does not verify; the pending section, the changes waiting for
another admin's signature (GET /v1/admin/operators).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				l, err := a.Operators.List(cmd.Context(), a.DB.Bun)
				if err != nil {
					return err
				}
				return show(cmd, l, func(out io.Writer) error { return printOperators(out, l) })
			})
		},
	}
}

// printOperators prints a listing: one line per key of each operator, the
// head and quorum, the pending changes, and the warnings.
func printOperators(out io.Writer, l operator.Listing) error {
	type line struct {
		op operator.View
		k  operator.KeyView
	}
	var lines []line
	for _, o := range l.Operators {
		for _, k := range o.Keys {
			lines = append(lines, line{o, k})
		}
	}
	if err := printTable(out, "no operators enrolled: svc admin operators init enrolls the first admin", "NAME\tROLE\tSTATUS\tENROLLED\tKEY ID\tKEY STATUS\tPUBLIC KEY", lines, func(tw io.Writer, x line) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", x.op.Name, x.op.Role, activeOr(x.op.Revoked), x.op.EnrolledAt, x.k.KeyID, activeOr(x.k.Revoked), x.k.PublicKey)
	}); err != nil {
		return err
	}
	if l.ChainHead != nil {
		fmt.Fprintf(out, "chain head %s; a change needs %d admin signature(s)\n", *l.ChainHead, l.Quorum)
	}
	if len(l.Pending) > 0 {
		fmt.Fprintln(out, "pending:")
		for _, p := range l.Pending {
			fmt.Fprintf(out, "  %s %s%s: signed by %s, needs %d more (since %s)\n", p.Change.Action, p.Change.Name, changeFacts(p.Change),
				strings.Join(p.SignedBy, ", "), p.ApprovalsNeeded, p.CreatedAt)
		}
	}
	if len(l.Discrepancies) > 0 {
		fmt.Fprintln(out, "WARNING: the operators tables disagree with the enrollment chain (only the chain makes an operator; run svc admin audit verify):")
		for _, d := range l.Discrepancies {
			fmt.Fprintf(out, "  %s\n", d)
		}
	}
	return nil
}

func activeOr(revoked bool) string {
	if revoked {
		return "revoked"
	}
	return "active"
}

// changeFacts renders what a change sets besides its name.
func changeFacts(c operator.Change) string {
	var parts []string
	if c.Role != "" {
		parts = append(parts, "role "+string(c.Role))
	}
	if c.PublicKey != "" {
		parts = append(parts, "key "+c.PublicKey)
	}
	if c.KeyID != "" {
		parts = append(parts, "key "+c.KeyID)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// optionalKey reads the operator's key file when one is named (--key, else
// $SVC_OPERATOR_KEY); nil when neither is.
func optionalKey(path string) (*operator.Signer, error) {
	if path == "" && os.Getenv(KeyEnv) == "" {
		return nil, nil
	}
	return loadKey(path)
}

// actorOf is who performs an action that needs no signature (an
// acknowledgement, a snapshot): with a key (optionalKey), the operator the
// enrollment chain enrolled it for, "op:NAME", refused unless the key and
// its operator are active; without one, the login name, "cli:LOGIN".
func actorOf(ctx context.Context, a *app.App, s *operator.Signer) (audit.Actor, error) {
	if s == nil {
		return loginActor()
	}
	r, err := a.Operators.Roster(ctx, a.DB.Bun)
	if err != nil {
		return audit.Actor{}, err
	}
	id := s.Public().ID()
	k, ok := r.Keys[id]
	if !ok {
		return audit.Actor{}, fmt.Errorf("--key: key %s is not an enrolled operator key (svc admin operators list)", id)
	}
	if op := r.Operators[k.Operator]; k.Revoked || op == nil || op.Revoked {
		return audit.Actor{}, fmt.Errorf("--key: key %s of %s is revoked", id, k.Operator)
	}
	return audit.Actor{ID: "op:" + k.Operator, Label: k.Operator}, nil
}
