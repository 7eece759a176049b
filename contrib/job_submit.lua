--[[
rgpu: job_submit/lua for remote GPUs.  Install next to slurm.conf and set
JobSubmitPlugins=lua.

Turns `--gres=rgpu:N` (and `--rgpu-mem=SIZE` alone, meaning one GPU) into
the cluster-wide license `rgpu`, so the job may run on any node, with or
without GPUs, while the scheduler still counts the cluster's GPUs: a busy
cluster leaves the job pending with reason "Licenses".  The count is per job
(not per node, unlike ordinary GRES): the job's GPUs are network devices
that every node of the job reaches.

A license is a seat: a whole GPU costs SEATS_PER_GPU seats, a slice
(--rgpu-mem) costs one.  Set Licenses=rgpu:<GPUs * SEATS_PER_GPU> in
slurm.conf.  With SEATS_PER_GPU=1 a started job always finds room; a larger
value lets up to that many slices share a GPU (see admin.md, installed with the docs).
]]

local SEATS_PER_GPU = 1

-- The spank option as Slurm hands it to job_submit: plugin "rgpu",
-- option "rgpu-mem".
local MEM_OPT = "_SLURM_SPANK_OPTION_rgpu_rgpu_mem="

-- and "rgpu-share" (a compute share: a percentage of the GPU)
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

local function spank_mem(job_desc)
	return spank_opt(job_desc, MEM_OPT)
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

-- Licenses=rgpu:N from the slurm.conf beside this script, to name the
-- cluster's size in the refusal (slurmctld would refuse anyway, vaguely).
local function cluster_seats()
	local src = debug.getinfo(1, "S").source
	local dir = src:match("^@(.*)/[^/]*$")
	if not dir then
		return nil
	end
	local f = io.open(dir .. "/slurm.conf", "r")
	if not f then
		return nil
	end
	local seats
	for line in f:lines() do
		local lic = line:match("^%s*[Ll]icenses%s*=%s*(%S+)")
		if lic then
			seats = tonumber(lic:match("rgpu:(%d+)"))
		end
	end
	f:close()
	return seats
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
	local mem = spank_mem(job_desc)
	local bad_share = check_share(job_desc, mem)
	if bad_share ~= nil then
		slurm.log_user("%s", bad_share)
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
	local lic = job_desc.licenses
	if lic ~= nil and lic:match("rgpu") then
		slurm.log_user("rgpu: give either --gres=rgpu:N or --licenses=rgpu:N, not both")
		return slurm.ERROR
	end
	local seats = n * SEATS_PER_GPU
	if mem ~= nil then
		seats = n
	end
	local total = cluster_seats()
	if total ~= nil then
		local gpus = math.floor(total / SEATS_PER_GPU)
		if n > gpus then
			slurm.log_user("rgpu: --gres=rgpu:%d asks for more GPUs than the cluster has (%d)",
				n, gpus)
			return slurm.ERROR
		end
	end
	if rest ~= nil then
		job_desc.tres_per_node = rest
	end
	-- The plugin's prolog reads the GPU count here (licenses count seats);
	-- only root and SlurmUser can change an AdminComment.
	job_desc.admin_comment = "rgpu-request;count=" .. n
	if lic ~= nil and lic ~= "" then
		job_desc.licenses = lic .. ",rgpu:" .. seats
	else
		job_desc.licenses = "rgpu:" .. seats
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
