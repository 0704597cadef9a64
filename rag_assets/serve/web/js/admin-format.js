// How the admin console writes figures: ages, sizes, hashes and run states.

/** "just now", "5 min ago", "3 h ago", "2 d ago" from an age in seconds; "" when unknown. */
export function ago(seconds) {
  if (typeof seconds !== "number") return "";
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

/** 1536 -> "1.5 KB" (powers of 1024, one decimal under 10). */
export function bytes(count) {
  if (typeof count !== "number") return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 && unit ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** The first 12 characters of a content hash (the whole one goes in a title). */
export function shortHash(hash) {
  return typeof hash === "string" && hash ? hash.slice(0, 12) : "–";
}

/** "1 chunk", "3 chunks". */
export function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

/** "4 steps done, 3 materialisations" for a run's progress. */
export function runProgress(run) {
  const parts = [];
  if (typeof run.stepsSucceeded === "number") parts.push(`${plural(run.stepsSucceeded, "step")} done`);
  if (run.stepsFailed) parts.push(`${run.stepsFailed} failed`);
  if (typeof run.materializations === "number") parts.push(plural(run.materializations, "materialisation"));
  return parts.join(", ");
}
