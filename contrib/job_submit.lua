--[[
rgpu: job_submit/lua for remote GPUs.  Install next to slurm.conf and set
JobSubmitPlugins=lua.

Turns `--gres=rgpu:N` and `--rgpu-mem=SIZE` (alone: one GPU) into the
cluster-wide license `rgpu`, counted in MiB of GPU memory, so the job may run
on any node, with or without GPUs, while the scheduler holds it pending
(reason "Licenses") until the cluster's GPUs have room for it.  The count is
per job (not per node, unlike ordinary GRES): the job's GPUs are network
devices that every node of the job reaches.

slurm.conf: Licenses=rgpu:<sum of every GPU's memory in MiB>, and, when
--rgpu-share is in use, rgpushare:<100 x GPUs>.

What a job is charged, per GPU it asks for:
  - a whole GPU: the GPU's memory (and a share of 100);
  - a slice of SIZE: the part of a GPU it takes when slices of that size
    fill a GPU: GPU / floor(GPU / (SIZE + CTX_RESERVE_MIB)), e.g. on a 4 GiB
    GPU with a 526 MiB reserve a 1 GiB slice costs 2048 (two fit), a 3 GiB
    slice 4096 (one fits).  A GPU whose charges sum to its memory holds
    them all, so what Slurm admits fits; only fragmentation across GPUs
    can leave an admitted job without one GPU with room, and then the
    plugin's prolog waits for room (see admin.md, installed with the docs);
  - its --rgpu-share percentage of rgpushare, if that license exists.
]]

-- Device memory rgpud sets aside per slice for its context, in MiB: rgpud's
-- --ctx-reserve (default 526M: a context with a kernel run on an H100,
-- driver 580, test/gpu/context-cost.sh).  Keep the two equal.
local CTX_RESERVE_MIB = 526
-- One GPU's memory in MiB.  nil: the rgpu license total divided by the GPUs
-- slurm.conf declares (Gres=rgpu:N on NodeName lines): GPUs of one size.
local GPU_MIB = nil

-- The spank options as Slurm hands them to job_submit: plugin "rgpu",
-- options "rgpu-mem" and "rgpu-share".
local MEM_OPT = "_SLURM_SPANK_OPTION_rgpu_rgpu_mem="
local SHARE_OPT = "_SLURM_SPANK_OPTION_rgpu_rgpu_share="

local function spank_opt(job_desc, prefix)
	local env = job_desc.spank_job_env
	if type(env) ~= "table" then
		return nil
	end
	for _, v in pairs(env) do
		if type(v) == "string" and v:sub(1, #prefix) == prefix then
			return v:sub(#prefix + 1)
		end
	end
	return nil
end

-- --rgpu-share=P: P a whole percentage, 1..100, and only with --rgpu-mem
-- (a whole GPU is not shared).  nil when fine, else the refusal.
local function check_share(job_desc, mem)
	local share = spank_opt(job_desc, SHARE_OPT)
	if share == nil then
		return nil
	end
	local p = tonumber(share:match("^%d+$") or "")
	if p == nil or p < 1 or p > 100 then
		return string.format("rgpu: --rgpu-share=%s: not a percentage of the GPU from 1 to 100",
			share)
	end
	if mem == nil then
		return "rgpu: --rgpu-share goes with --rgpu-mem (a slice): a whole GPU is not shared"
	end
	return nil
end

-- "2G", "1.5G", "512M", "4096K", "2GiB", a bare number of MiB: MiB (rounded
-- up), or nil.  (The plugin refuses malformed sizes before submission.)
local function size_mib(s)
	local num, unit = s:match("^%s*([%d%.]+)%s*([KkMmGgTt]?)[iI]?[bB]?%s*$")
	num = tonumber(num)
	if num == nil then
		return nil
	end
	local mult = { [""] = 1, k = 1 / 1024, m = 1, g = 1024, t = 1024 * 1024 }
	return math.ceil(num * mult[unit:lower()])
end

-- Hosts in a Slurm host list: "gpu[01-16]", "a,b", "n[1-2,5]".
local function count_hosts(list)
	local n, depth, item = 0, 0, ""
	local function add(it)
		if it == "" then
			return
		end
		local c = 1
		for ranges in it:gmatch("%[([^%]]*)%]") do
			local k = 0
			for r in ranges:gmatch("[^,]+") do
				local a, b = r:match("^(%d+)%-(%d+)$")
				if a then
					k = k + tonumber(b) - tonumber(a) + 1
				else
					k = k + 1
				end
			end
			c = c * k
		end
		n = n + c
	end
	for ch in list:gmatch(".") do
		if ch == "[" then
			depth = depth + 1
		elseif ch == "]" then
			depth = depth - 1
		end
		if ch == "," and depth == 0 then
			add(item)
			item = ""
		else
			item = item .. ch
		end
	end
	add(item)
	return n
end

-- From the slurm.conf beside this script: the rgpu and rgpushare license
-- totals and the number of GPUs (Gres=rgpu:N per node).  Read once.
local conf
local function cluster_conf()
	if conf then
		return conf
	end
	conf = {}
	local src = debug.getinfo(1, "S").source
	local dir = src:match("^@(.*)/[^/]*$")
	local f = dir and io.open(dir .. "/slurm.conf", "r")
	if not f then
		return conf
	end
	local gpus = 0
	for line in f:lines() do
		line = line:gsub("#.*$", "")
		local lic = line:match("^%s*[Ll]icenses%s*=%s*(%S+)")
		if lic then
			conf.mib = tonumber(lic:match("rgpu:(%d+)"))
			conf.share = tonumber(lic:match("rgpushare:(%d+)"))
		end
		local nodes = line:match("^%s*[Nn]ode[Nn]ame%s*=%s*(%S+)")
		local per = line:match("[Gg]res%s*=%S*rgpu:(%d+)")
		if nodes and per and nodes ~= "DEFAULT" then
			gpus = gpus + count_hosts(nodes) * tonumber(per)
		end
	end
	f:close()
	if gpus > 0 then
		conf.gpus = gpus
	end
	return conf
end

-- Splits tres_per_node ("gres:rgpu:2,gres:foo:1") into the rgpu count and
-- what remains.
local function take_rgpu(tpn)
	if tpn == nil or tpn == "" then
		return nil, tpn
	end
	local n, rest = nil, {}
	for item in string.gmatch(tpn, "[^,]+") do
		local name, cnt = item:match("^gres[:/](rgpu)(.*)$")
		if name == nil then
			table.insert(rest, item)
		else
			local c
			if cnt == "" then
				c = 1
			else
				c = tonumber(cnt:match("^:(%d+)$"))
			end
			if c == nil then
				return -1, tpn
			end
			n = (n or 0) + c
		end
	end
	return n, table.concat(rest, ",")
end

local function convert(job_desc)
	local n, rest = take_rgpu(job_desc.tres_per_node)
	local mem = spank_opt(job_desc, MEM_OPT)
	local share = spank_opt(job_desc, SHARE_OPT)
	local bad_share = check_share(job_desc, mem)
	if bad_share ~= nil then
		slurm.log_user("%s", bad_share)
		return slurm.ERROR
	end
	local lic = job_desc.licenses
	if lic ~= nil and (lic:match("^rgpu") or lic:match(",rgpu")) then
		slurm.log_user("rgpu: ask for GPUs with --gres=rgpu:N and --rgpu-mem, not --licenses=rgpu")
		return slurm.ERROR
	end
	if n == -1 then
		slurm.log_user("rgpu: --gres=rgpu takes a plain count (rgpu:N), not a type")
		return slurm.ERROR
	end
	if n == nil and mem == nil then
		return slurm.SUCCESS
	end
	if n == nil then
		n = 1
	end
	if n < 1 then
		slurm.log_user("rgpu: --gres=rgpu:%d asks for no GPU", n)
		return slurm.ERROR
	end
	local c = cluster_conf()
	if c.gpus ~= nil and n > c.gpus then
		slurm.log_user("rgpu: --gres=rgpu:%d asks for more GPUs than the cluster has (%d)",
			n, c.gpus)
		return slurm.ERROR
	end
	local gpu = GPU_MIB
	if gpu == nil and c.mib and c.gpus then
		gpu = math.floor(c.mib / c.gpus)
	end
	if gpu == nil or gpu < 1 then
		slurm.log_error("rgpu job_submit.lua: cannot tell a GPU's memory: set GPU_MIB, or "
			.. "Licenses=rgpu:<MiB> and Gres=rgpu:N in slurm.conf")
		slurm.log_user("rgpu: the cluster's rgpu license is not configured (see slurmctld's log)")
		return slurm.ERROR
	end
	-- per GPU: memory units and compute share
	local cost, pct = gpu, 100
	if mem ~= nil then
		local m = size_mib(mem)
		if m == nil or m < 1 then
			slurm.log_user("rgpu: --rgpu-mem=%s is not a size", mem)
			return slurm.ERROR
		end
		local per = m + CTX_RESERVE_MIB
		if per > gpu then
			slurm.log_user("rgpu: --rgpu-mem=%s is larger than a GPU can give: %d MiB less %d MiB for the context",
				mem, gpu, CTX_RESERVE_MIB)
			return slurm.ERROR
		end
		cost = math.ceil(gpu / math.floor(gpu / per))
		pct = 0
		if share ~= nil then
			pct = tonumber(share:match("^%s*(%d+)")) or 0
		end
	end
	if rest ~= nil then
		job_desc.tres_per_node = rest
	end
	-- The plugin's prolog reads the GPU count here (the license counts
	-- memory); only root and SlurmUser can change an AdminComment.
	job_desc.admin_comment = "rgpu-request;count=" .. n
	local want = "rgpu:" .. (n * cost)
	if c.share ~= nil and pct > 0 then
		want = want .. ",rgpushare:" .. (n * pct)
	end
	if lic ~= nil and lic ~= "" then
		job_desc.licenses = lic .. "," .. want
	else
		job_desc.licenses = want
	end
	return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	-- A script error would let the job through unconverted: refuse instead.
	local ok, rc = pcall(convert, job_desc)
	if not ok then
		slurm.log_error("rgpu job_submit.lua: %s", tostring(rc))
		slurm.log_user("rgpu: internal error in job_submit.lua (see slurmctld's log)")
		return slurm.ERROR
	end
	return rc
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	local n = take_rgpu(job_desc.tres_per_node)
	if n ~= nil then
		slurm.log_user("rgpu: a job's remote GPUs cannot be changed after submission")
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

slurm.log_info("rgpu job_submit.lua loaded")
return slurm.SUCCESS
