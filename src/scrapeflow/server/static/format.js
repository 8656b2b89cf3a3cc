// How numbers, money and times read on the page. Money stays a decimal string from the API to
// the screen: grouped and summed digit by digit (BigInt), never through a float.

/** "-1234567.50" → "-1,234,567.50": thousands grouped, the decimals exactly as given. */
export function grouped(decimal) {
  const text = String(decimal);
  const match = /^([-+]?)(\d+)(\.\d+)?$/.exec(text);
  if (!match) return text;
  const [, sign, whole, fraction = ""] = match;
  return `${sign === "-" ? "-" : ""}${whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",")}${fraction}`;
}

/** A count, grouped: 10000 → "10,000". */
export const count = (n) => grouped(String(Math.trunc(Number(n) || 0)));

/** "1 account", "2,000 accounts": a count with its noun ("access" → "accesses"). */
export const counted = (n, noun) => `${count(n)} ${n === 1 ? noun : noun.endsWith("s") ? `${noun}es` : `${noun}s`}`;

/** "1234.5 EUR" → "1,234.50 EUR" as shown, the decimals as the API wrote them. */
export const moneyText = (amount, currency) => `${grouped(amount)} ${currency ?? ""}`.trim();

function scaled(decimal) {
  const match = /^([-+]?)(\d+)(?:\.(\d+))?$/.exec(String(decimal));
  if (!match) return null;
  const [, sign, whole, fraction = ""] = match;
  const units = BigInt(whole + fraction);
  return { units: sign === "-" ? -units : units, scale: fraction.length };
}

/** The exact sum of decimal strings, as a decimal string with the most decimals any had. */
export function sum(decimals) {
  const parts = decimals.map(scaled).filter((part) => part !== null);
  const scale = Math.max(0, ...parts.map((part) => part.scale));
  let total = 0n;
  for (const part of parts) total += part.units * 10n ** BigInt(scale - part.scale);
  const negative = total < 0n;
  const digits = (negative ? -total : total).toString().padStart(scale + 1, "0");
  const whole = digits.slice(0, digits.length - scale);
  const fraction = scale ? `.${digits.slice(digits.length - scale)}` : "";
  return `${negative ? "-" : ""}${whole}${fraction}`;
}

/** Balances totalled per currency: [[currency, total, accounts], …] by currency. */
export function totalsByCurrency(accounts) {
  const byCurrency = new Map();
  for (const account of accounts) {
    const list = byCurrency.get(account.currency) ?? [];
    list.push(String(account.balance));
    byCurrency.set(account.currency, list);
  }
  return [...byCurrency.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([currency, balances]) => [currency, sum(balances), balances.length]);
}

const CLOCK = new Intl.DateTimeFormat("en-US", {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
  second: "2-digit", hourCycle: "h23", timeZoneName: "short",
});

/** An instant in this browser's zone, with the zone: "2026-11-27 17:35:36 EST". */
export function when(iso) {
  if (!iso) return "—";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  const part = Object.fromEntries(CLOCK.formatToParts(at).map((p) => [p.type, p.value]));
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} `
    + `${part.timeZoneName}`;
}
