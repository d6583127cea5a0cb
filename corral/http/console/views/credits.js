// The tenant's credit balance and its latest ledger rows.

import {api} from "../api.js";
import {describe, h, replace, when} from "../dom.js";

export function creditsView(root) {
  const balance = h("div", {class: "card", id: "credit-balance"}, h("p", {class: "muted"}, "Loading…"));
  const rows = h("tbody");
  replace(root, h("h1", {}, "Credits"), balance, h("h2", {}, "Latest transactions"),
    h("table", {}, h("thead", {}, h("tr", {}, ["When", "Type", "Credits", "Description", "Resource"].map((t) => h("th", {}, t)))), rows));
  (async () => {
    try {
      const account = await api("GET", "/credits/balance");
      replace(balance, h("p", {}, h("strong", {id: "balance-credits", style: "font-size:1.6rem"}, String(account.balance_credits ?? 0)), " credits"),
        h("p", {class: "muted"}, `earned ${account.lifetime_earned ?? 0} · spent ${account.lifetime_spent ?? 0}`,
          account.credit_expiry_at ? ` · next expiry ${when(account.credit_expiry_at)}` : ""));
    } catch (error) {
      replace(balance, h("p", {class: "error-text"}, describe(error)));
    }
    try {
      const {transactions} = await api("GET", "/credits/transactions?page_size=50");
      replace(rows, transactions.length ? transactions.map((row) => h("tr", {},
        h("td", {}, when(row.created_at || row.inserted_at)), h("td", {}, row.type), h("td", {}, row.amount_credits),
        h("td", {}, row.description || ""), h("td", {}, row.resource_type ? `${row.resource_type} ${row.resource_id || ""}` : "")))
        : [h("tr", {}, h("td", {colspan: 5, class: "muted"}, "No transactions."))]);
    } catch (error) {
      replace(rows, h("tr", {}, h("td", {colspan: 5, class: "error-text"}, describe(error))));
    }
  })();
  return () => {};
}
