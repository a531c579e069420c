// The console's script (served from the binary; the pages have no inline
// script). It signs the operator in with their passkey: it asks the
// console for the statement's challenge, has the browser ask the passkey
// for its assertion (WebAuthn), and posts the assertion back. It also
// makes a passkey (/passkeys/new) and shows its public key to enroll.
"use strict";

(function () {
  function toB64u(buf) {
    const bytes = new Uint8Array(buf);
    let s = "";
    for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function fromB64u(s) {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
    const out = new Uint8Array(b.length);
    for (let i = 0; i < b.length; i++) out[i] = b.charCodeAt(i);
    return out;
  }

  async function post(url, csrf, body, type) {
    const res = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json", "Content-Type": type, "X-CSRF-Token": csrf },
      body: body,
    });
    let data = {};
    try { data = await res.json(); } catch (e) { data = { error: "The console answered " + res.status + "." }; }
    if (!res.ok) throw new Error(data.error || ("The console answered " + res.status + "."));
    return data;
  }

  function signIn(form) {
    const errorBox = document.getElementById("sign-in-error");
    const keys = document.getElementById("keys");
    const select = document.getElementById("key_id");
    const button = form.querySelector("button[type=submit]");

    function show(msg) {
      errorBox.textContent = msg;
      errorBox.hidden = !msg;
    }

    form.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      show("");
      if (!window.PublicKeyCredential || !navigator.credentials) {
        show("This browser cannot use passkeys.");
        return;
      }
      button.disabled = true;
      const csrf = form.elements.csrf.value;
      try {
        const params = new URLSearchParams();
        params.set("name", form.elements.name.value.trim());
        if (!keys.hidden && select.value) params.set("key_id", select.value);
        const ch = await post("/sign-in/challenge", csrf, params.toString(), "application/x-www-form-urlencoded");
        if (ch.choose) {
          select.replaceChildren();
          for (const id of ch.choose) {
            const o = document.createElement("option");
            o.value = id;
            o.textContent = id;
            select.appendChild(o);
          }
          keys.hidden = false;
          show("You have several passkeys: choose the one to sign in with.");
          return;
        }
        const cred = await navigator.credentials.get({
          publicKey: {
            challenge: fromB64u(ch.challenge),
            rpId: ch.rp_id,
            timeout: ch.timeout_ms,
            userVerification: "required",
          },
        });
        const r = cred.response;
        const done = await post("/sign-in", csrf, JSON.stringify({
          authenticator_data: toB64u(r.authenticatorData),
          client_data_json: toB64u(r.clientDataJSON),
          signature: toB64u(r.signature),
        }), "application/json");
        window.location.assign(done.location);
      } catch (e) {
        show(e && e.message ? e.message : String(e));
      } finally {
        button.disabled = false;
      }
    });
  }

  // makePasskey has the browser make a passkey for the console's RP ID
  // and shows its public key, as the console reads it, to be enrolled.
  function makePasskey(form) {
    const errorBox = document.getElementById("passkey-error");
    const made = document.getElementById("passkey-made");
    const button = form.querySelector("button[type=submit]");

    function show(msg) {
      errorBox.textContent = msg;
      errorBox.hidden = !msg;
    }

    form.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      show("");
      made.hidden = true;
      if (!window.PublicKeyCredential || !navigator.credentials) {
        show("This browser cannot make passkeys.");
        return;
      }
      button.disabled = true;
      const csrf = form.elements.csrf.value;
      const name = form.elements.name.value.trim();
      try {
        const params = new URLSearchParams();
        params.set("name", name);
        const ch = await post("/passkeys/challenge", csrf, params.toString(), "application/x-www-form-urlencoded");
        const cred = await navigator.credentials.create({
          publicKey: {
            challenge: fromB64u(ch.challenge),
            rp: { id: ch.rp_id, name: "svc console" },
            user: { id: fromB64u(ch.user_id), name: name, displayName: name },
            pubKeyCredParams: [-7, -8, -35, -36, -257].map(function (alg) { return { type: "public-key", alg: alg }; }),
            authenticatorSelection: { residentKey: "required", requireResidentKey: true, userVerification: "required" },
            attestation: "none",
            timeout: ch.timeout_ms,
          },
        });
        const r = cred.response;
        const key = await post("/passkeys", csrf, JSON.stringify({
          attestation_object: toB64u(r.attestationObject),
          client_data_json: toB64u(r.clientDataJSON),
        }), "application/json");
        document.getElementById("public-key").value = key.public_key;
        document.getElementById("key-id").textContent = key.key_id;
        document.getElementById("enroll-command").textContent =
          "svc admin operators enroll --name " + name + " --role ROLE --public-key " + key.public_key + " --key ADMIN_KEY_FILE";
        document.getElementById("add-key-command").textContent =
          "svc admin operators add-key " + name + " --public-key " + key.public_key + " --key ADMIN_KEY_FILE";
        made.hidden = false;
      } catch (e) {
        show(e && e.message ? e.message : String(e));
      } finally {
        button.disabled = false;
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const form = document.getElementById("sign-in");
    if (form) signIn(form);
    const passkey = document.getElementById("passkey-new");
    if (passkey) makePasskey(passkey);
  });
})();
