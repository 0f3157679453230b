import { Migration } from "@mikro-orm/migrations";

/**
 * The open marketplace's first columns. A plan may be `open` (callable with any account key,
 * without subscribing; payg and free plans only, which the check keeps true even for a row
 * written by hand). A hoster's model names the public model it serves (`canonical_id`, its
 * model_id unless given) and how its weights are stored (`quantization`, `unknown` unless given):
 * (hoster, model) on an open plan is an endpoint of that canonical id. Rows already there take
 * those defaults.
 */
export class Migration20261230000000OpenPlansAndEndpoints extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table products
         add column open boolean not null default false,
         add constraint products_open_pricing_check check (not open or pricing_model in ('payg', 'free'))`,
    );
    this.addSql(
      `alter table hoster_models
         add column canonical_id text,
         add column quantization text not null default 'unknown'`,
    );
    this.addSql(`update hoster_models set canonical_id = model_id`);
    this.addSql(`alter table hoster_models alter column canonical_id set not null`);
    this.addSql(`create index hoster_models_canonical_idx on hoster_models (canonical_id)`);
  }
}
