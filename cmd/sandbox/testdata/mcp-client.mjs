// An independent MCP client (the reference TypeScript SDK, from the npm
// registry) driving `sandbox mcp` over stdio. Arguments: the sandbox
// binary and its --home. Run by TestMCPWithAnIndependentClient.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, home] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: bin,
  args: ["--home", home, "mcp"],
  env: process.env,
});
const client = new Client({ name: "independent", version: "1.0.0" });
await client.connect(transport);

const { tools } = await client.listTools();
console.log("tools: " + tools.map((t) => t.name).sort().join(",") + ",");

const made = await client.callTool({ name: "create_sandbox", arguments: {} });
const id = made.structuredContent.id;

const ran = await client.callTool({
  name: "exec",
  arguments: { sandbox: id, command: ["sh", "-c", "echo from node"] },
});
console.log("exec: " + ran.structuredContent.exit_status + " " + ran.structuredContent.stdout);

try {
  const bad = await client.callTool({ name: "exec", arguments: { sandbox: id, command: [] } });
  console.log("bad: no error " + JSON.stringify(bad));
} catch (e) {
  console.log("bad: " + e.code);
}
await client.callTool({ name: "close_sandbox", arguments: { sandbox: id } });
await client.close();
