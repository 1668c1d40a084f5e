// The SDK's tests, in one process so that they share one real service
// (test/harness.ts), stopped when they end.

import { after } from "node:test";
import { stopService } from "./harness.js";

import "./suites/offline.js";
import "./suites/address.js";
import "./suites/sandboxes.js";
import "./suites/runs.js";
import "./suites/service.js";
import "./suites/tls.js";
import "./suites/bundle.js";
import "./suites/ports.js";
import "./suites/parity.js"; // last: it checks every request the suites before it sent

after(stopService);
