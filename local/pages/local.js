// What both pages share: the server's URLs, sign-in (local only), REST calls with a bearer token.
"use strict";

const Local = {
  config: null,

  async load() {
    const response = await fetch("/local/config");
    Local.config = await response.json();
    return Local.config;
  },

  // POST /local/sign-in: the stage's Cognito pool (moto) signs the user in; its tokens and role.
  async signIn(email, password) {
    const response = await fetch("/local/sign-in", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ email, password }),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
    return body;
  },

  // One REST call: {status, body} (body parsed when it is JSON).
  async api(method, path, token, body, headers) {
    const init = { method, headers: Object.assign({ Authorization: "Bearer " + token }, headers || {}) };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(Local.config.rest + path, init);
    const text = await response.text();
    let parsed = text;
    try { parsed = text ? JSON.parse(text) : null; } catch (e) { /* not JSON */ }
    return { status: response.status, body: parsed };
  },

  errorText(result) {
    const error = result.body && result.body.error;
    return result.status + " " + (error ? error.code + ": " + error.message : JSON.stringify(result.body));
  },

  el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  },
};
